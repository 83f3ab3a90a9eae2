//go:build linux

package inpod

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// container is a PID namespace whose 1 is `idle -supervise`, run as a user
// other than root, as a pod's commands container is; exec runs a process
// in it as a runtime's exec does: from outside, so its parent is none the
// namespace knows.
type container struct {
	t      *testing.T
	helper string
	main   *exec.Cmd
}

const podUser = "65534"

func newContainer(t *testing.T) *container {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("precondition: a PID namespace and another user need root (CI runs as root)")
	}
	for _, tool := range []string{"nsenter", "setpriv", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("precondition: util-linux's %s: %v", tool, err)
		}
	}
	// Outside t.TempDir, whose parent only root may enter.
	dir, err := os.MkdirTemp("", "supervise-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &container{t: t, helper: filepath.Join(dir, "helper")}
	if err := copyFile(os.Args[0], c.helper); err != nil {
		t.Fatal(err)
	}
	// /proc shows the namespace, as a container's does; the mount stays
	// in the namespace's own mount namespace.
	script := `mount --make-rprivate / && mount -t proc proc /proc && exec setpriv --reuid=` + podUser + ` --regid=` + podUser +
		` --clear-groups -- "$0" idle -supervise`
	c.main = exec.Command("sh", "-c", script, c.helper)
	c.main.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	c.main.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	logged, err := c.main.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.main.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.main.Process.Kill()
		_ = c.main.Wait()
	})
	// It says it is up once it listens.
	line, err := bufio.NewReader(logged).ReadString('\n')
	if err != nil || !strings.Contains(line, "idle") {
		t.Fatalf("the main process's first line: %q %v", line, err)
	}
	return c
}

// exec runs argv in the container as its user, entered from outside.
func (c *container) exec(argv ...string) (stdout, stderr []byte, err error) {
	c.t.Helper()
	args := append([]string{"--target", strconv.Itoa(c.main.Process.Pid), "--pid", "--mount", "--",
		"setpriv", "--reuid=" + podUser, "--regid=" + podUser, "--clear-groups", "--"}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		c.t.Fatalf("%q did not end", argv)
	}
	return out.Bytes(), errOut.Bytes(), err
}

// run runs a command through run -supervised and returns its frames.
func (c *container) run(script string) (*frames, RunStatus, error) {
	c.t.Helper()
	out, _, err := c.exec(c.helper, "run", "-supervised", "-root", "/", "--", "sh", "-c", script)
	f := readFrames(c.t, bytes.NewReader(out))
	var st RunStatus
	if f.status != nil {
		f.decodeStatus(c.t, &st)
	}
	return f, st, err
}

// A command that ends every process it may signal (its helper among
// them, same user, same namespace) still gets its answer: the main
// process ran it and writes the status, and it ends what the command
// left running.
func TestSupervisedCommandOutlivesItsHelper(t *testing.T) {
	c := newContainer(t)
	f, st, err := c.run("kill -9 -1; sleep 300 & echo done; exit 3")
	if f.stdout.String() != "done\n" || st.Exit != 3 || st.Left != 0 {
		t.Fatalf("answer %q, status %+v (helper: %v)", f.stdout.String(), st, err)
	}
	out, _, _ := c.exec("sh", "-c", "cat /proc/[0-9]*/comm")
	if bytes.Contains(out, []byte("sleep")) {
		t.Errorf("the command's sleep outlived it:\n%s", out)
	}
	// A command's status after it is one of its own again.
	if f, st, err := c.run("echo again"); err != nil || f.stdout.String() != "again\n" || st.Exit != 0 {
		t.Fatalf("the next command: %q %+v %v", f.stdout.String(), st, err)
	}
}

// The session's code cannot have the main process run a command of its
// choosing: its processes have a parent in the namespace, and the main
// process takes hand-overs only from processes exec'd from outside.
func TestSupervisorRefusesTheSessionsOwnProcesses(t *testing.T) {
	c := newContainer(t)
	// The helper started by a shell of the container, as a command would.
	out, errOut, err := c.exec("sh", "-c", `"$0" run -supervised -root / -- echo smuggled; echo "exit $?"`, c.helper)
	if bytes.Contains(out, []byte("smuggled")) || !bytes.Contains(errOut, []byte("refused: not a process exec'd")) ||
		!bytes.Contains(out, []byte("exit 2")) {
		t.Fatalf("a hand-over from inside: out %q, stderr %q, %v", out, errOut, err)
	}
}

// No signal a command may send ends the main process, nor does its user
// read its memory: the next command runs.
func TestSupervisorOutlivesSignals(t *testing.T) {
	c := newContainer(t)
	_, st, err := c.run(`for s in $(seq 1 31); do kill -$s 1 || exit 1; done
sleep 0.2; cat /proc/1/environ >/dev/null 2>&1 && exit 4; exit 0`)
	if err != nil || st.Exit != 0 {
		t.Fatalf("signals to the main process: %+v %v", st, err)
	}
	if f, st, err := c.run("echo alive"); err != nil || f.stdout.String() != "alive\n" || st.Exit != 0 {
		t.Fatalf("the command after the signals: %q %+v %v", f.stdout.String(), st, err)
	}
}

// floodEnv makes the test binary a process of the session's that opens
// that many connections to the container's main process, sends nothing
// on them and holds them for floodHold.
const floodEnv = "INPOD_TEST_FLOOD"

const floodHold = 20 * time.Second

func flood(count string) int {
	n, err := strconv.Atoi(count)
	name, nerr := supervisorSocket()
	if err != nil || nerr != nil {
		return 2
	}
	var held []int
	for range n {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			break
		}
		if unix.Connect(fd, &unix.SockaddrUnix{Name: name}) != nil {
			unix.Close(fd)
			continue
		}
		held = append(held, fd)
	}
	os.WriteFile(os.Getenv("INPOD_TEST_FLOODED"), []byte(strconv.Itoa(len(held))), 0o644)
	time.Sleep(floodHold)
	return 0
}

// The session's processes connecting by the hundred, sending nothing,
// hold up no command: they are refused as they come, the server's helper
// is not queued behind them.
func TestSupervisorIsNotHeldUpByAFlood(t *testing.T) {
	c := newContainer(t)
	// Where the flood says how many it holds, which its user may write.
	flooded := filepath.Join(filepath.Dir(c.helper), "flooded")
	if err := os.WriteFile(flooded, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(flooded, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.exec("sh", "-c", `INPOD_TEST_FLOODED="$1" INPOD_TEST_FLOOD=500 "$0" >/dev/null 2>&1 &`, c.helper, flooded); err != nil {
		t.Fatal(err)
	}
	var held []byte
	if !waitFor(func() bool { held, _ = os.ReadFile(flooded); return len(held) > 0 }) {
		t.Fatal("the flood did not start")
	}
	if n, _ := strconv.Atoi(string(held)); n < 100 {
		t.Fatalf("the flood held %s connections", held)
	}
	// Before the flood ends: c.run gives up long before floodHold.
	began := time.Now()
	f, st, err := c.run("echo through")
	if err != nil || f.stdout.String() != "through\n" || st.Exit != 0 {
		t.Fatalf("a command during the flood: %q %+v %v", f.stdout.String(), st, err)
	}
	if late := time.Since(began); late > floodHold/2 {
		t.Fatalf("the command waited %v, behind the flood", late)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// A hand-over is read whole though signals come while the main process
// waits for it: a socket with a read wait is never resumed after a
// signal, and the main process takes every one (a child's end each time a
// command's process goes). An interrupted read refused the helper and
// closed on what it had sent, so the helper read a reset, not an answer.
func TestAHandOverIsReadThroughSignals(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	setReadWait(fds[0], time.Minute)
	// Caught, as the main process catches every signal.
	caught := make(chan os.Signal, 64)
	signal.Notify(caught, syscall.SIGUSR1)
	defer signal.Stop(caught)

	type read struct {
		msg []byte
		err error
	}
	reader, got := make(chan int, 1), make(chan read, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		reader <- unix.Gettid()
		msg, files, err := readHandOver(fds[0])
		for _, f := range files {
			f.Close()
		}
		got <- read{msg, err}
	}()
	tid := <-reader
	for range 20 {
		if err := unix.Tgkill(os.Getpid(), tid, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case r := <-got:
		t.Fatalf("the read ended before the hand-over came: %q %v", r.msg, r.err)
	default:
	}
	msg := []byte(`{"op":"held","digest":"x"}`)
	if err := writeAll(fds[1], append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || !bytes.Equal(r.msg, msg) {
		t.Fatalf("the hand-over read %q, %v; want %q", r.msg, r.err, msg)
	}
}
