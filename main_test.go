package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"atelier/testrig/liveserver"
	"atelier/testrig/pgtest"
	"atelier/testrig/wait"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// build compiles the atelier binary once per test.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "atelier")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dataDir is a fresh data dir whose ancestors the PostgreSQL account can
// pass through (t.TempDir is 0700 when we are root).
func dataDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "atelier-main-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(base, "data")
}

// The embedded default end to end, as a person runs it: the binary starts
// its own PostgreSQL, prints where it serves, answers /healthz, lets
// `user add` in beside it, and a Ctrl-C stops PostgreSQL too.
func TestServeEmbeddedAndStop(t *testing.T) {
	bin := build(t)
	data, addr := dataDir(t), freeAddr(t)
	env := append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr, "DATABASE_URL=", "ATELIER_ADMIN_PASSWORD=")

	srv := exec.Command(bin)
	srv.Env = env
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill() })

	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var sawPassword, sawServing bool
	deadline := time.After(90 * time.Second)
	for !sawServing {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the server exited early:\n%s", stderr.String())
			}
			sawPassword = sawPassword || strings.Contains(line, "sign in as admin with password")
			sawServing = strings.Contains(line, "serving on http://"+addr)
		case <-deadline:
			t.Fatalf("no 'serving on' line within 90 s:\n%s", stderr.String())
		}
	}
	if !sawPassword {
		t.Fatal("the first start did not print the generated admin password")
	}

	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", res, err)
	}
	res.Body.Close()

	add := exec.Command(bin, "user", "add", "carol", "--admin")
	add.Env = env
	add.Stdin = strings.NewReader("carol-password\n")
	if out, err := add.CombinedOutput(); err != nil || !strings.Contains(string(out), "added site admin carol") {
		t.Fatalf("user add beside the running server: %v\n%s", err, out)
	}

	pid := postmasterPID(t, data)
	if err := srv.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server did not exit cleanly: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not stop within 60 s of SIGINT")
	}
	// The server has exited, so its log is all in.
	if !strings.Contains(stderr.String(), "creating the PostgreSQL cluster (first start") {
		t.Fatalf("the first start did not say what it waits for:\n%s", stderr.String())
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("PostgreSQL (pid %d) outlived the server", pid)
	}
	if _, err := os.Stat(filepath.Join(data, "postgres", "data", "postmaster.pid")); !os.IsNotExist(err) {
		t.Fatalf("postmaster.pid left behind: %v", err)
	}

	// carol was stored: a second start on the same data dir lets her in and
	// prints no new admin password.
	login := exec.Command(bin, "user", "add", "carol")
	login.Env = env
	login.Stdin = strings.NewReader("another-password\n")
	if out, err := login.CombinedOutput(); err == nil || !strings.Contains(string(out), "taken") {
		t.Fatalf("carol did not survive the restart: %v\n%s", err, out)
	}
}

// With DATABASE_URL set the server uses that database and starts nothing.
func TestServeWithDatabaseURL(t *testing.T) {
	bin := build(t)
	data, addr := dataDir(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := exec.CommandContext(ctx, bin)
	srv.Env = append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr,
		"DATABASE_URL="+pgtest.NewDatabase(t, ""), "ATELIER_ADMIN_PASSWORD=first-admin-pw")
	var out bytes.Buffer
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if !wait.Until(2*wait.Long, func() bool { return healthy(addr) }) {
		t.Fatalf("no healthy server within %v:\n%s", (2 * wait.Long).Duration(), out.String())
	}
	srv.Process.Signal(os.Interrupt)
	if err := srv.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(data, "postgres")); !os.IsNotExist(err) {
		t.Fatalf("an embedded cluster was made although DATABASE_URL was set: %v", err)
	}
	if strings.Contains(out.String(), "sign in as admin with password") {
		t.Fatal("the password from ATELIER_ADMIN_PASSWORD was printed")
	}
}

func postmasterPID(t *testing.T, data string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "postgres", "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// With no PostgreSQL binaries and no DATABASE_URL the server exits with one
// line saying what to install or set. The binaries are hidden in a private
// mount namespace, which needs root.
func TestNoBinariesExplainsItself(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: hiding the installed PostgreSQL binaries needs root (a private mount namespace)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed to hide the PostgreSQL binaries")
	}
	bin := build(t)
	script := `set -e
for d in /usr/lib/postgresql /usr/local/pgsql; do if [ -d "$d" ]; then /bin/mount -t tmpfs none "$d"; fi; done
exec "$0"`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, bin)
	cmd.Env = []string{"PATH=/nonexistent", "ATELIER_DATA=" + dataDir(t), "ATELIER_ADDR=" + freeAddr(t)}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the server started without PostgreSQL binaries:\n%s", out)
	}
	text := strings.TrimSpace(string(out))
	if strings.Count(text, "\n") != 0 || !strings.Contains(text, "apt-get install postgresql") || !strings.Contains(text, "DATABASE_URL") {
		t.Fatalf("want one line naming what to install or set, got:\n%s", text)
	}
}

// The embedded PostgreSQL is the server's to keep running. Killed, its
// postmaster is started again by the server, as its child, and a request
// that needs the database (a sign-in) succeeds again. Left running by a
// server that was killed, it is stopped at the next start and started
// again as that server's child, which stops it when it stops.
func TestEmbeddedPostgreSQLIsSupervised(t *testing.T) {
	bin := build(t)
	data, addr := dataDir(t), freeAddr(t)
	const password = "supervised-admin-pw"
	env := append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr, "DATABASE_URL=",
		"ATELIER_ADMIN_PASSWORD="+password)
	pgData := filepath.Join(data, "postgres", "data")
	t.Cleanup(func() { // a failed test leaves no PostgreSQL behind
		if b, err := os.ReadFile(filepath.Join(pgData, "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil && running(pid) {
				_ = syscall.Kill(pid, syscall.SIGQUIT)
			}
		}
	})
	signIn := func(within wait.Span) {
		t.Helper()
		wait.ForNil(t, within, "a sign-in", func() error {
			_, err := liveserver.SignIn("http://"+addr, "admin", password)
			return err
		})
	}
	// restarted waits for a postmaster other than the killed one: a
	// sign-in alone may still be served by a backend of the killed one,
	// which lingers a moment after it.
	restarted := func(killed int) {
		t.Helper()
		wait.For(t, 2*wait.Long, "a new postmaster", func() bool {
			b, err := os.ReadFile(filepath.Join(pgData, "postmaster.pid"))
			pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
			return err == nil && pid != killed && running(pid)
		})
		signIn(2 * wait.Long)
	}

	srv, log := serve(t, bin, env, addr)
	first := postmasterPID(t, data)
	if ppid := parentPID(t, first); ppid != srv.Process.Pid {
		t.Fatalf("the postmaster's parent is %d, want the server %d", ppid, srv.Process.Pid)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restarted(first)
	second := postmasterPID(t, data)
	if second == first || !running(second) || parentPID(t, second) != srv.Process.Pid {
		t.Fatalf("after the kill the postmaster is %d (running %v), want a new child of the server %d:\n%s",
			second, running(second), srv.Process.Pid, log)
	}
	if !strings.Contains(log.String(), "PostgreSQL exited; starting it again") {
		t.Fatalf("the server did not log the restart:\n%s", log)
	}

	// The server dies; its PostgreSQL lives on without it.
	if err := srv.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = srv.Wait()
	if !running(second) {
		t.Fatalf("PostgreSQL %d died with the server; the test needs it orphaned", second)
	}
	srv, log = serve(t, bin, env, addr)
	third := postmasterPID(t, data)
	if third == second || running(second) || parentPID(t, third) != srv.Process.Pid {
		t.Fatalf("after the restart the postmaster is %d, the orphan %d running %v; want a new child of the server %d:\n%s",
			third, second, running(second), srv.Process.Pid, log)
	}
	if !strings.Contains(log.String(), "stopping it to run it as ours") {
		t.Fatalf("the server did not say it took the orphan over:\n%s", log)
	}
	signIn(wait.Long)

	if err := syscall.Kill(third, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restarted(third)
	fourth := postmasterPID(t, data)
	if err := srv.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("the server did not exit cleanly: %v\n%s", err, log)
	}
	if running(fourth) {
		t.Fatalf("PostgreSQL (pid %d) outlived the server", fourth)
	}
	if _, err := os.Stat(filepath.Join(pgData, "postmaster.pid")); !os.IsNotExist(err) {
		t.Fatalf("postmaster.pid left behind: %v", err)
	}
}

// serve starts the server and waits until /healthz answers 200. Its
// output is in the returned buffer.
func serve(t *testing.T, bin string, env []string, addr string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	srv := exec.Command(bin)
	srv.Env = env
	out := &lockedBuffer{}
	srv.Stdout, srv.Stderr = out, out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill() })
	if !wait.Until(3*wait.Long, func() bool { return healthy(addr) }) {
		t.Fatalf("no healthy server within %v:\n%s", (3 * wait.Long).Duration(), out)
	}
	return srv, out
}

// healthy says whether the server at addr answers its health check.
func healthy(addr string) bool {
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// running tells whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && len(b) > 0
}

// parentPID is the parent of process pid, from /proc.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// A site admin who lost their password sets a new one from the shell, with
// the server running: the new password signs in at once, the old one no
// longer does, and the sign-ins made with it end.
func TestResetPasswordWhileServing(t *testing.T) {
	bin := build(t)
	data, addr := dataDir(t), freeAddr(t)
	env := append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr, "DATABASE_URL=",
		"ATELIER_ADMIN_PASSWORD=forgotten-admin-pw")
	srv, log := serve(t, bin, env, addr)
	base := "http://" + addr
	before, err := liveserver.SignIn(base, "admin", "forgotten-admin-pw")
	if err != nil {
		t.Fatal(err)
	}
	reset := func(name, password string) (string, error) {
		cmd := exec.Command(bin, "user", "reset-password", name)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(password + "\n")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := reset("admin", "short"); err == nil || !strings.Contains(out, "at least 8 characters") {
		t.Fatalf("a weak password: %v\n%s", err, out)
	}
	if out, err := reset("ghost", "a-long-password"); err == nil || !strings.Contains(out, "no user with that name") {
		t.Fatalf("an unknown user: %v\n%s", err, out)
	}
	out, err := reset("admin", "remembered-admin-pw")
	if err != nil || !strings.Contains(out, "set the password of admin") {
		t.Fatalf("user reset-password beside the running server: %v\n%s", err, out)
	}

	after, err := liveserver.SignIn(base, "admin", "remembered-admin-pw")
	if err != nil {
		t.Fatalf("the new password: %v\n%s", err, log)
	}
	if _, err := liveserver.SignIn(base, "admin", "forgotten-admin-pw"); err == nil {
		t.Fatal("the old password still signs in")
	}
	// Another process ended the sign-in: the server believes what it read
	// for at most two seconds.
	wait.ForNil(t, wait.Long, "the sign-in made with the old password to end", func() error {
		res, err := before.HC.Get(base + "/admin/users")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			return fmt.Errorf("it still works: %d", res.StatusCode)
		}
		return nil
	})
	req, _ := http.NewRequest(http.MethodGet, base+"/admin?part=feed", nil)
	req.Header.Set("HX-Request", "true")
	res, err := after.HC.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	feed, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(feed), "reset the password of admin from the command line") {
		t.Errorf("the feed does not say it:\n%s", feed)
	}
	if err := srv.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("the server did not exit cleanly: %v\n%s", err, log)
	}
}
