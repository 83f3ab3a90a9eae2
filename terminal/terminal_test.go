package terminal

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestResize: the size is set before the shell starts, and stty size
// follows Resize.
func TestResize(t *testing.T) {
	m := newManager(t, Config{})
	term := openShell(t, m, "stty -echo; stty size; read -r _; stty size; read -r _", Options{Cols: 100, Rows: 40})
	s := dial(t, serve(t, term), "", "?from=0")
	s.expectOutput("40 100\r\n", 5*time.Second)
	for _, bad := range [][2]int{{0, 10}, {10, 0}, {1001, 10}, {10, 1001}, {-1, 5}} {
		if err := term.Resize(bad[0], bad[1]); !errors.Is(err, ErrBadSize) {
			t.Errorf("Resize(%d, %d): %v, want ErrBadSize", bad[0], bad[1], err)
		}
	}
	if err := term.Resize(120, 50); err != nil {
		t.Fatal(err)
	}
	if c, r := term.Size(); c != 120 || r != 50 {
		t.Errorf("Size %d×%d", c, r)
	}
	term.Input(1, []byte("\n"))
	s.expectOutput("50 120\r\n", 5*time.Second)
	if err := term.Resize(1000, 1); err != nil {
		t.Errorf("1000×1: %v", err)
	}
}

// sessionProcs lists the live processes (not zombies) whose session or
// process group is pid.
func sessionProcs(pid int) []int {
	var ps []int
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(p); ok && st.state != 'Z' && (st.session == pid || st.pgrp == pid) {
			ps = append(ps, p)
		}
	}
	return ps
}

// TestCloseLeavesNoProcess: a shell with jobs in their own process groups
// and an orphaned grandchild is gone after Close, which is idempotent.
func TestCloseLeavesNoProcess(t *testing.T) {
	m := newManager(t, Config{})
	term := openShell(t, m, "set -m; sleep 1000 & sleep 1000 & (sleep 1000 &); printf R; wait", Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	s.expectOutput("R", 5*time.Second)
	pid := term.Pid()
	if ps := sessionProcs(pid); len(ps) < 4 {
		t.Fatalf("session %d has processes %v; want the shell and three sleeps", pid, ps)
	}
	start := time.Now()
	if err := term.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if ps := sessionProcs(pid); len(ps) > 0 {
		t.Fatalf("after Close, processes %v remain in session %d", ps, pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("the shell %d is still there", pid)
	}
	if x, ok := term.ExitStatus(); !ok || x.Signal != "SIGKILL" {
		t.Errorf("exit %+v %v, want SIGKILL", x, ok)
	}
	if err := term.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := term.Resize(80, 24); !errors.Is(err, ErrClosed) {
		t.Errorf("Resize after Close: %v", err)
	}
	if _, err := term.Input(1, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Input after Close: %v", err)
	}
	if x := exitOf(t, s.next(5*time.Second)); x.Signal != "SIGKILL" {
		t.Errorf("exit event %+v", x)
	}
}

// TestCloseUsesInjectedKill: Close runs Options.Kill, and a failed kill
// is reported and leaves the terminal running.
func TestCloseUsesInjectedKill(t *testing.T) {
	m := newManager(t, Config{})
	var calls atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	var term *Terminal
	kill := func() error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("sandbox unreachable")
		}
		return syscall.Kill(-term.Pid(), syscall.SIGKILL)
	}
	term = openShell(t, m, "exec sleep 60", Options{Kill: kill})
	if err := term.Close(); err == nil || !strings.Contains(err.Error(), "sandbox unreachable") {
		t.Fatalf("Close with a failing kill: %v", err)
	}
	select {
	case <-term.Done():
		t.Fatal("the terminal ended though the kill failed")
	default:
	}
	fail.Store(false)
	if err := term.Close(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() < 2 {
		t.Errorf("kill called %d times", calls.Load())
	}
}

// TestSlaveOwnerAndMode: the tty is given to the shell's user, mode 0620.
func TestSlaveOwnerAndMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: giving the tty to another user (chown) needs root")
	}
	m := newManager(t, Config{})
	term := openOn(t, m, owned{bash(`stat -c '%u:%g:%a' "$(tty)"`), 1234, 5}, Options{})
	out, _, _ := dial(t, serve(t, term), "", "?from=0").collect(0, 5*time.Second)
	if string(out) != "1234:5:620\r\n" {
		t.Errorf("tty owner and mode %q, want 1234:5:620", out)
	}
}
