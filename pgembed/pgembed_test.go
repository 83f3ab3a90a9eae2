package pgembed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"atelier/testrig/wait"
)

// childDirEnv makes the test binary a process that starts a cluster and
// waits to be killed; see TestDieWithParent. With childUntiedEnv set too,
// the cluster outlives it, as a killed server's does.
const (
	childDirEnv    = "PGEMBED_TEST_CHILD_DIR"
	childUntiedEnv = "PGEMBED_TEST_CHILD_UNTIED"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		runChild(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

// runChild starts a cluster, with DieWithParent unless childUntiedEnv is
// set, prints the postmaster's PID and waits for the parent test to kill it.
func runChild(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Dir: dir, NoSync: true, DieWithParent: os.Getenv(childUntiedEnv) == ""})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("pid", c.current().pid)
	// Not a wait: the child lives until the parent test kills it, which
	// it does long before this.
	time.Sleep(2 * time.Minute)
	os.Exit(1)
}

// clusterDir returns a cluster directory in a fresh folder the cluster user
// can reach: t.TempDir makes 0700 folders, which postgres could not enter
// when the tests run as root.
func clusterDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(base, "pg")
}

func testConfig(t *testing.T, dir string) Config {
	return Config{
		Dir:           dir,
		NoSync:        true,
		DieWithParent: true,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
}

// startCluster starts a cluster and stops it when the test ends.
func startCluster(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return c
}

func stopCluster(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func queryString(t *testing.T, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %q: %v", dsn, err)
	}
	defer closeConn(conn)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func execSQL(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %q: %v", dsn, err)
	}
	defer closeConn(conn)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func waitExited(t *testing.T, c *Cluster) {
	t.Helper()
	select {
	case <-c.current().exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("postmaster %d still runs", c.current().pid)
	}
}

// waitGone waits until no process of the cluster is left.
func waitGone(t *testing.T, dataDir string, pid int) {
	t.Helper()
	wait.ForNil(t, wait.Long, "every process of "+dataDir+" to end", func() error {
		if servesDataDir(pid, dataDir) || len(leftovers(dataDir)) > 0 {
			return fmt.Errorf("postmaster %d (running: %v), others %v", pid, servesDataDir(pid, dataDir), leftovers(dataDir))
		}
		return nil
	})
}

func TestStartServesOnlyOnItsSocket(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	c := startCluster(t, testConfig(t, dir))
	if !c.Owned() {
		t.Error("Owned() = false for a cluster Start launched")
	}

	if got := queryString(t, c.DSN("atelier"), "SELECT current_user || '/' || current_database()"); got != "atelier/atelier" {
		t.Errorf("user/database = %q, want atelier/atelier", got)
	}
	if got := queryString(t, c.DSN("atelier"), "SHOW listen_addresses"); got != "" {
		t.Errorf("listen_addresses = %q, want empty", got)
	}
	got := queryString(t, c.DSN("atelier"), "SELECT pg_encoding_to_char(encoding) || ' ' || datctype FROM pg_database WHERE datname = 'atelier'")
	if got != "UTF8 C.UTF-8" && got != "UTF8 C" {
		t.Errorf("encoding and ctype = %q, want UTF8 with C.UTF-8 or C", got)
	}

	sock := filepath.Join(dir, socketName)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket mode = %v, want a socket with 0700", fi.Mode())
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cluster dir mode = %v (%v), want 0700", fi.Mode(), err)
	}

	// A Ctrl-C in the terminal goes to the foreground process group; the
	// postmaster must not be in ours.
	if pgid, err := syscall.Getpgid(c.current().pid); err != nil || pgid != c.current().pid {
		t.Errorf("postmaster process group = %d (%v), want its own, %d", pgid, err, c.current().pid)
	}
	if acct, err := clusterAccount(); err != nil {
		t.Fatal(err)
	} else if acct != nil {
		if uid := processUID(t, c.current().pid); uid != acct.uid {
			t.Errorf("postmaster runs as uid %d, want %s (%d)", uid, acct.name, acct.uid)
		}
	}
	if log, err := os.ReadFile(filepath.Join(dir, logName)); err != nil || !strings.Contains(string(log), "ready to accept connections") {
		t.Errorf("%s lacks the postmaster's output (%v):\n%s", logName, err, log)
	}

	// The postmaster's own sockets: its listening unix socket is the one in
	// dir, and none of them is TCP.
	inodes := socketInodes(t, c.current().pid)
	unix := procNetUnix(t)
	var paths []string
	for _, ino := range inodes {
		if p, ok := unix[ino]; ok {
			paths = append(paths, p)
		}
	}
	if !slices.Contains(paths, sock) {
		t.Errorf("postmaster listens on unix sockets %v, want %s among them", paths, sock)
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		tcp := procNetInodes(t, table)
		for _, ino := range inodes {
			if tcp[ino] {
				t.Errorf("postmaster holds TCP socket inode %s (%s)", ino, table)
			}
		}
	}
}

// processUID returns the real uid of a process.
func processUID(t *testing.T, pid int) uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if fields := strings.Fields(rest); len(fields) > 0 {
				uid, err := strconv.ParseUint(fields[0], 10, 32)
				if err != nil {
					t.Fatal(err)
				}
				return uint32(uid)
			}
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}

// socketInodes returns the inodes of the sockets open in process pid.
func socketInodes(t *testing.T, pid int) []string {
	t.Helper()
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	var inodes []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if ino, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes = append(inodes, strings.TrimSuffix(ino, "]"))
		}
	}
	if len(inodes) == 0 {
		t.Fatalf("process %d has no sockets open", pid)
	}
	return inodes
}

// procNetUnix maps the inodes of bound unix sockets to their paths.
func procNetUnix(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode [Path]
		fields := strings.Fields(sc.Text())
		if len(fields) >= 8 {
			out[fields[6]] = fields[7]
		}
	}
	return out
}

// procNetInodes returns the socket inodes listed in a /proc/net/tcp table.
func procNetInodes(t *testing.T, table string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(table)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // no IPv6
		}
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
		if fields := strings.Fields(line); len(fields) >= 10 {
			out[fields[9]] = true
		}
	}
	return out
}

func TestStopEndsThePostmaster(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	c := startCluster(t, testConfig(t, dir))
	dataDir := filepath.Join(dir, dataName)
	if !servesDataDir(c.current().pid, dataDir) || len(leftovers(dataDir)) < 2 {
		t.Fatalf("before Stop: postmaster %d not found in /proc, or no children (%v)", c.current().pid, leftovers(dataDir))
	}

	stopCluster(t, c)
	if servesDataDir(c.current().pid, dataDir) {
		t.Errorf("postmaster %d still runs after Stop", c.current().pid)
	}
	if pids := leftovers(dataDir); len(pids) > 0 {
		t.Errorf("postgres processes %v still run after Stop", pids)
	}
	for _, p := range []string{filepath.Join(dataDir, "postmaster.pid"), filepath.Join(dir, socketName)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Stop: %v, want it removed", p, err)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil || !strings.Contains(string(log), "fast shutdown request") {
		t.Errorf("the log shows no fast shutdown (%v):\n%s", err, log)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestStopEscalatesWhenContextEnds(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	c := startCluster(t, testConfig(t, dir))

	// A stopped checkpointer never writes the shutdown checkpoint, so the
	// fast shutdown cannot finish.
	pid, err := strconv.Atoi(queryString(t, c.DSN("atelier"), "SELECT pid::text FROM pg_stat_activity WHERE backend_type = 'checkpointer'"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pm := c.current()
	err = c.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want it to report the forced shutdown", err)
	}
	// Order, not a window of times: Stop gave up on the fast shutdown
	// only once the context had ended, and returned only once the forced
	// shutdown had ended the postmaster.
	if ctx.Err() == nil {
		t.Error("Stop forced the shutdown before its context ended")
	}
	select {
	case <-pm.exited:
	default:
		t.Errorf("Stop returned while the postmaster %d still runs", pm.pid)
	}
	waitGone(t, filepath.Join(dir, dataName), c.current().pid)
	if err2 := c.Stop(context.Background()); err2 != err {
		t.Errorf("second Stop = %v, want the first result %v", err2, err)
	}
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	cfg := testConfig(t, dir)
	c := startCluster(t, cfg)
	execSQL(t, c.DSN("atelier"), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restart')")
	stopCluster(t, c)

	c2 := startCluster(t, cfg)
	if !c2.Owned() {
		t.Error("the restarted cluster is not owned")
	}
	if got := queryString(t, c2.DSN("atelier"), "SELECT v FROM kept"); got != "before restart" {
		t.Errorf("kept = %q", got)
	}
}

func TestStartTakesOverDataOfAnotherUser(t *testing.T) {
	acct, err := clusterAccount()
	if err != nil {
		t.Fatal(err)
	}
	if acct == nil || acct.name == "nobody" {
		t.Skip("precondition: running the cluster as the postgres user needs root and that user")
	}
	t.Parallel()
	dir := clusterDir(t)
	cfg := testConfig(t, dir)
	stopCluster(t, startCluster(t, cfg))

	// As if the cluster had been made when only nobody existed.
	nobody := &account{name: "nobody", uid: 65534, gid: 65534}
	if err := nobody.chownTree(filepath.Join(dir, dataName)); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, cfg)
	if got := queryString(t, c.DSN("atelier"), "SELECT 'ok'"); got != "ok" {
		t.Errorf("query = %q", got)
	}
	if !acct.owns(filepath.Join(dir, dataName, "PG_VERSION")) {
		t.Errorf("the data files were not given to %s", acct.name)
	}
}

func TestStartRecoversFromKilledPostmaster(t *testing.T) {
	t.Parallel()
	for _, pidTaken := range []bool{false, true} {
		name := "pid gone"
		if pidTaken {
			name = "pid taken by another process"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := clusterDir(t)
			cfg := testConfig(t, dir)
			c := startCluster(t, cfg)
			execSQL(t, c.DSN("atelier"), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before kill')")

			if err := syscall.Kill(c.current().pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitExited(t, c)
			pidFile := filepath.Join(dir, dataName, "postmaster.pid")
			if _, err := os.Stat(pidFile); err != nil {
				t.Fatalf("the killed postmaster left no postmaster.pid: %v", err)
			}

			if pidTaken {
				// PostgreSQL alone refuses to start while the PID in its
				// lock files is a live process of its own user; only our
				// check tells it is stale.
				sleeper := exec.Command("sleep", "60")
				acct, err := clusterAccount()
				if err != nil {
					t.Fatal(err)
				}
				if acct != nil {
					sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: acct.credential()}
				}
				if err := sleeper.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
				for _, p := range []string{pidFile, filepath.Join(dir, socketName+".lock")} {
					replaceFirstLine(t, p, strconv.Itoa(sleeper.Process.Pid))
				}
			}

			c2 := startCluster(t, cfg)
			if !c2.Owned() || c2.current().pid == c.current().pid {
				t.Errorf("after the kill: Owned = %v, pid %d (killed %d)", c2.Owned(), c2.current().pid, c.current().pid)
			}
			if got := queryString(t, c2.DSN("atelier"), "SELECT v FROM kept"); got != "before kill" {
				t.Errorf("kept = %q", got)
			}
		})
	}
}

func replaceFirstLine(t *testing.T, path, line string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "\n")
	if err := os.WriteFile(path, []byte(line+"\n"+rest), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSecondStartAttaches(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	cfg := testConfig(t, dir)
	c := startCluster(t, cfg)

	cfg2 := cfg
	cfg2.Database = "second"
	c2 := startCluster(t, cfg2)
	if c2.Owned() {
		t.Error("the second Start owns the cluster")
	}
	if c2.current().pid != c.current().pid || c2.DSN("x") != c.DSN("x") {
		t.Errorf("attached to pid %d / %q, want %d / %q", c2.current().pid, c2.DSN("x"), c.current().pid, c.DSN("x"))
	}
	if got := queryString(t, c2.DSN("second"), "SELECT current_database()"); got != "second" {
		t.Errorf("database = %q; the attaching Start should have created it", got)
	}

	for range 2 {
		if err := c2.Stop(context.Background()); err != nil {
			t.Errorf("Stop of the attached cluster: %v", err)
		}
	}
	if !servesDataDir(c.current().pid, filepath.Join(dir, dataName)) {
		t.Fatal("the first postmaster is gone after the attached Stop")
	}
	if got := queryString(t, c.DSN("atelier"), "SELECT 'still here'"); got != "still here" {
		t.Errorf("query after the attached Stop = %q", got)
	}
}

func TestStartFailsFastWithTheLog(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	cfg := testConfig(t, dir)
	c := startCluster(t, cfg)
	stopCluster(t, c)

	conf := filepath.Join(dir, dataName, "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("shared_buffers = 'plenty'\n")
	if err := errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	c2, err := Start(ctx, cfg)
	if err == nil {
		_ = c2.Stop(ctx)
		t.Fatal("Start succeeded with a broken postgresql.conf")
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("Start took %v to notice the postmaster exited", took)
	}
	if !strings.Contains(err.Error(), `invalid value for parameter "shared_buffers"`) {
		t.Errorf("the error lacks the log's reason: %v", err)
	}
	if len(leftovers(filepath.Join(dir, dataName))) > 0 {
		t.Error("postgres processes left after the failed start")
	}
}

func TestInterruptedInitdbIsRedone(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	cfg := testConfig(t, dir)

	// Cancel the start while initdb is writing its files.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if wait.Until(wait.Long, func() bool {
			_, err := os.Stat(filepath.Join(dir, initName, "global"))
			return err == nil || ctx.Err() != nil
		}) {
			cancel()
		}
	}()
	c, err := Start(ctx, cfg)
	if err == nil {
		_ = c.Stop(context.Background())
		t.Fatal("Start succeeded although cancelled during initdb")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(dir, dataName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an interrupted initdb left %s: %v", dataName, err)
	}

	c = startCluster(t, cfg)
	if got := queryString(t, c.DSN("atelier"), "SELECT 'ok'"); got != "ok" {
		t.Errorf("query = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, initName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("initdb's scratch folder is still there: %v", err)
	}
}

func TestDieWithParent(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	child, pid := startChild(t, dir, false)
	dataDir := filepath.Join(dir, dataName)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	waitGone(t, dataDir, pid)

	c := startCluster(t, testConfig(t, dir))
	if got := queryString(t, c.DSN("atelier"), "SELECT 'after'"); got != "after" {
		t.Errorf("query = %q", got)
	}
}

// startChild runs this test binary as a process that starts a cluster on
// dir (see runChild), tied to it unless untied, and returns it with the
// postmaster's PID. A postmaster the test leaves behind is ended.
func startChild(t *testing.T, dir string, untied bool) (*exec.Cmd, int) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childDirEnv+"="+dir)
	if untied {
		child.Env = append(child.Env, childUntiedEnv+"=1")
	}
	child.Stderr = t.Output()
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		t.Fatalf("child said %q", line)
	}
	dataDir := filepath.Join(dir, dataName)
	if !servesDataDir(pid, dataDir) {
		t.Fatalf("postmaster %d is not running", pid)
	}
	t.Cleanup(func() {
		if servesDataDir(pid, dataDir) { // the test failed; do not leave it behind
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	})
	return child, pid
}

func TestSocketPathTooLong(t *testing.T) {
	base := clusterDir(t)
	// dir/.s.PGSQL.5432 is one byte over the limit.
	dir := filepath.Join(base, strings.Repeat("d", maxSocketPath+1-len(base)-2-len(socketName)))
	_, err := Start(context.Background(), Config{Dir: dir})
	if !errors.Is(err, ErrSocketPathTooLong) {
		t.Fatalf("Start = %v, want ErrSocketPathTooLong", err)
	}
	if _, err := os.Stat(base); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start created %s before refusing: %v", base, err)
	}
	// One byte less fits.
	if err := checkSocketPath(dir[:len(dir)-1]); err != nil {
		t.Errorf("checkSocketPath at the limit: %v", err)
	}
}

func TestCheckAncestorsNamesTheFolder(t *testing.T) {
	base := t.TempDir()
	closed := filepath.Join(base, "closed")
	if err := os.MkdirAll(filepath.Join(closed, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	stranger := &account{name: "stranger", uid: 54321, gid: 54321}
	err := stranger.checkAncestors(filepath.Join(closed, "inner", "pg"))
	if !errors.Is(err, ErrDirNotSearchable) || !strings.Contains(err.Error(), closed+" ") {
		t.Errorf("checkAncestors = %v, want ErrDirNotSearchable naming %s", err, closed)
	}
	if err := stranger.checkAncestors(filepath.Join(base, "pg")); err != nil {
		t.Errorf("checkAncestors under a 0711 folder: %v", err)
	}
}

func TestStartRefusesUnreachableDirAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: switching to another user needs root")
	}
	t.Parallel()
	base := filepath.Dir(clusterDir(t))
	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Config{Dir: filepath.Join(closed, "pg")})
	if !errors.Is(err, ErrDirNotSearchable) || !strings.Contains(err.Error(), closed) {
		t.Errorf("Start = %v, want ErrDirNotSearchable naming %s", err, closed)
	}
	if fi, err := os.Stat(closed); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the user's folder was changed: %v %v", fi.Mode(), err)
	}
}

func TestDSN(t *testing.T) {
	c := &Cluster{dir: `/tmp/a dir/it's\here`}
	cfg, err := pgconn.ParseConfig(c.DSN("my db"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != c.dir || cfg.Port != port || cfg.User != superuser || cfg.Database != "my db" || cfg.TLSConfig != nil {
		t.Errorf("parsed %q as host %q port %d user %q db %q tls %v", c.DSN("my db"), cfg.Host, cfg.Port, cfg.User, cfg.Database, cfg.TLSConfig != nil)
	}
	want := "host=/run/pg port=5432 user=atelier dbname=atelier sslmode=disable"
	if got := (&Cluster{dir: "/run/pg"}).DSN("atelier"); got != want {
		t.Errorf("DSN = %q, want %q", got, want)
	}
}
