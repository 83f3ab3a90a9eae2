package pgembed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// leftoverTimeout bounds the wait for the children of a killed
	// postmaster to notice and exit; until they do they hold its shared
	// memory and PostgreSQL refuses to start.
	leftoverTimeout = 10 * time.Second
	// maxLogSize is the size past which postgres.log is set aside at start.
	maxLogSize = 8 << 20
)

// errNotRunning reports a postmaster that exited while we waited for it.
var errNotRunning = errors.New("postmaster is not running")

// launch runs the postmaster as our child and waits until it accepts
// connections.
func (s *starter) launch(ctx context.Context) (*postmaster, error) {
	logPath := filepath.Join(s.dir, logName)
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > maxLogSize {
		_ = os.Rename(logPath, logPath+".1")
	}
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	defer logFile.Close() // the postmaster writes through its own descriptor
	offset, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	if s.acct != nil {
		_ = logFile.Chown(int(s.acct.uid), int(s.acct.gid))
	}

	args := []string{
		"-D", s.dataDir(),
		"-c", "listen_addresses=", // no TCP at all
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + quoteListItem(s.dir),
		"-c", "unix_socket_permissions=0700",
	}
	if s.cfg.NoSync {
		args = append(args, "-c", "fsync=off")
	}
	// Not exec.CommandContext: the cluster must outlive Start's context.
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Dir = s.dir
	cmd.Env = childEnv(s.binDir)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = s.procAttr()
	pm := &postmaster{exited: make(chan struct{})}
	exited := func(err error) {
		pm.waitErr = err
		// Ownership ends with the postmaster, unless we supervise it:
		// then we are about to start it again.
		if !s.cfg.Supervise {
			s.releaseOwner()
		}
		close(pm.exited)
	}
	if err := s.start(cmd, syscall.SIGQUIT, exited); err != nil {
		return nil, fmt.Errorf("pgembed: start postgres: %w", err)
	}
	pm.pid, pm.proc, pm.started = cmd.Process.Pid, cmd.Process, time.Now()
	s.log.Info("pgembed: starting PostgreSQL", "pid", pm.pid, "dir", s.dir, "bindir", s.binDir, "log", logPath)

	running := func() bool {
		select {
		case <-pm.exited:
			return false
		default:
			return true
		}
	}
	if err := waitReady(ctx, dsn(s.dir, maintenanceDB), running); err != nil {
		if errors.Is(err, errNotRunning) {
			<-pm.exited
			err = fmt.Errorf("postmaster exited (%v)", pm.waitErr)
		} else {
			pm.halt()
		}
		return nil, fmt.Errorf("pgembed: start postgres on %s: %w; end of %s:\n%s",
			s.dir, err, logPath, logTail(logPath, offset, 20))
	}
	s.log.Info("pgembed: PostgreSQL ready", "pid", pm.pid)
	return pm, nil
}

// halt ends an owned postmaster at once: an immediate shutdown (SIGQUIT),
// then SIGKILL if even that hangs.
func (pm *postmaster) halt() {
	_ = pm.proc.Signal(syscall.SIGQUIT)
	timer := time.NewTimer(killDelay)
	defer timer.Stop()
	select {
	case <-pm.exited:
	case <-timer.C:
		_ = pm.proc.Kill()
		<-pm.exited
	}
}

// waitReady polls until the server behind dsn accepts a connection. It gives
// up with errNotRunning as soon as running reports the postmaster gone,
// and after startTimeout.
func waitReady(ctx context.Context, dsn string, running func() bool) error {
	deadline := time.Now().Add(startTimeout)
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(attempt, dsn)
		cancel()
		if err == nil {
			closeConn(conn)
			return nil
		}
		if !running() {
			return errNotRunning
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no connection after %v: %w", startTimeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clearStale removes the lock files a postmaster that did not shut down
// cleanly left behind, once no postmaster of the directory is alive. The PID
// in them may by now belong to an unrelated process, and PostgreSQL, which
// only asks whether that PID is alive, would then refuse to start.
func (s *starter) clearStale(ctx context.Context, pid int) error {
	if pid < 0 && alive(-pid) && servesDataDir(-pid, s.dataDir()) {
		return fmt.Errorf("pgembed: a single-user postgres (pid %d) is using %s", -pid, s.dataDir())
	}
	s.log.Warn("pgembed: the previous PostgreSQL did not shut down cleanly; removing its postmaster.pid", "pid", pid, "dir", s.dir)
	if err := s.waitLeftovers(ctx); err != nil {
		return err
	}
	stale := []string{
		filepath.Join(s.dataDir(), "postmaster.pid"),
		filepath.Join(s.dir, socketName+".lock"),
		filepath.Join(s.dir, socketName),
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgembed: remove stale %w", err)
		}
	}
	return nil
}

// waitLeftovers waits for the children of a killed postmaster to exit.
func (s *starter) waitLeftovers(ctx context.Context) error {
	deadline := time.Now().Add(leftoverTimeout)
	for {
		pids := leftovers(s.dataDir())
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgembed: processes %v of a postmaster that was killed still use %s; stop them and start again", pids, s.dataDir())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgembed: wait for processes %v of a killed postmaster: %w", pids, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leftovers lists the postgres processes working in dataDir: every process
// of a cluster has its data folder as working directory.
func leftovers(dataDir string) []int {
	real, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || cwd != real {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && isPostgresCommand(cmdline) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isPostgresCommand tells whether a /proc cmdline is a postgres process: a
// postmaster runs .../postgres, its children rewrite it to "postgres: ...".
func isPostgresCommand(cmdline []byte) bool {
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	base := filepath.Base(argv0)
	return base == "postgres" || base == "postmaster" || strings.HasPrefix(argv0, "postgres:")
}

// readPIDFile reads the PID on the first line of dataDir/postmaster.pid.
// present is false when there is no such file; pid is 0 when the file holds
// none (a start that crashed while writing it).
func readPIDFile(dataDir string) (pid int, present bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("pgembed: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, true, nil
	}
	return pid, true, nil
}

// alive tells whether a process with this PID exists (possibly someone
// else's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// servesDataDir tells whether pid is a postmaster (or single-user postgres)
// of dataDir, by its command line and, when that names no absolute data
// folder, by its working directory, which the postmaster sets to the data
// folder.
func servesDataDir(pid int, dataDir string) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(raw) == 0 {
		return false // gone, or a zombie
	}
	args := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if base := filepath.Base(args[0]); base != "postgres" && base != "postmaster" {
		return false
	}
	for i, arg := range args {
		d, ok := strings.CutPrefix(arg, "-D")
		if !ok {
			continue
		}
		if d == "" && i+1 < len(args) {
			d = args[i+1]
		}
		if filepath.IsAbs(d) {
			return samePath(d, dataDir)
		}
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && samePath(cwd, dataDir)
}

func samePath(a, b string) bool {
	if ra, err := filepath.EvalSymlinks(a); err == nil {
		a = ra
	}
	if rb, err := filepath.EvalSymlinks(b); err == nil {
		b = rb
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// quoteListItem quotes a folder for a list setting such as
// unix_socket_directories, where a comma or a space would split it.
func quoteListItem(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// logTail returns the last n lines written to the log from offset on.
func logTail(path string, offset int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > 64<<10 {
		offset = fi.Size() - 64<<10
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return lastLines(string(b), n)
}
