//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

func TestNothingOutlivesACommand(t *testing.T) {
	sb := newSandbox(t, nil)
	for _, script := range []string{
		"setsid sleep 999 &",
		"nohup sleep 999 &",
		"(sleep 999 &) &",
		"sleep 999 &", // holds stdout and stderr open
		"setsid bash -c 'sleep 999 & sleep 998' </dev/null >/dev/null 2>&1 &",
	} {
		t.Run(script, func(t *testing.T) {
			s := newSession(t, sb)
			start := time.Now()
			res, err := s.run(t, script+"\necho started")
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %s", took)
			}
			if string(res.Stdout) != "started\n" || res.ExitCode != 0 {
				t.Errorf("result %+v", res)
			}
			if left := procsOf(s.uid); len(left) > 0 {
				t.Errorf("left after Run: %v", left)
			}
		})
	}
}

func TestForkBomb(t *testing.T) {
	sb := newSandbox(t, nil)
	lim := sandbox.Limits{Timeout: 5 * time.Second, TimeoutExit: 124}

	t.Run("main exits", func(t *testing.T) {
		s := newSession(t, sb)
		start := time.Now()
		res, err := sb.Run(context.Background(), s.spec(":(){ :|:& };:"), lim)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("exit %d after %s", res.ExitCode, time.Since(start))
		if left := procsOf(s.uid); len(left) > 0 {
			t.Errorf("left: %d processes", len(left))
		}
	})

	t.Run("main waits", func(t *testing.T) {
		s := newSession(t, sb)
		// While the bomb goes off, the server must keep starting processes.
		spawned := make(chan error, 1)
		var during int
		go func() {
			// Gone off: its uid runs dozens of processes, and until the
			// timeout ends them.
			// The count that passed the test is the one kept: a bomb's
			// processes come and go, so a second count may be lower.
			if !wait.Until(wait.Span(lim.Timeout), func() bool {
				during = max(during, len(procsOf(s.uid)))
				return during >= 50
			}) {
				spawned <- errors.New("the bomb never went off")
				return
			}
			spawned <- exec.Command("/bin/true").Run()
		}()
		start := time.Now()
		res, err := sb.Run(context.Background(), s.spec(":(){ :|:& };: ; sleep 60"), lim)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 124 || !res.TimedOut {
			t.Errorf("result %d timedOut=%v, want 124", res.ExitCode, res.TimedOut)
		}
		if took > lim.Timeout+5*time.Second {
			t.Errorf("took %s", took)
		}
		if err := <-spawned; err != nil {
			t.Errorf("spawn during the bomb: %v", err)
		}
		t.Logf("%d processes during the bomb", during)
		if during < 50 {
			t.Errorf("the bomb did not go off: %d processes", during)
		}
		if left := procsOf(s.uid); len(left) > 0 {
			t.Errorf("left: %d processes", len(left))
		}
	})
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("spawn after the bomb: %v", err)
	}
}

func TestTimeoutIgnoringTERM(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	start := time.Now()
	res, err := sb.Run(context.Background(), s.spec("trap '' TERM; echo waiting; sleep 200"),
		sandbox.Limits{Timeout: 2 * time.Second, TimeoutExit: 124})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 124 || !res.TimedOut || string(res.Stdout) != "waiting\n" {
		t.Errorf("result %+v", res)
	}
	// Order, not a window of times: the command ended once its timeout
	// had passed, and by the kill that follows the ignored TERM, before
	// its sleep would have ended by itself.
	if took < 2*time.Second || took >= 200*time.Second {
		t.Errorf("took %s, want past the 2 s timeout and before the 200 s sleep's end", took)
	}
	if left := procsOf(s.uid); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

func TestKillAll(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	// Started outside the sandbox, as the session's user: a double-forked
	// daemon in a session of its own and a loop that keeps forking (up to
	// its process limit, and on retrying) while it is being killed.
	cmd := exec.Command("/bin/bash", "--noprofile", "--norc", "-c", `
		ulimit -u 150
		( setsid bash -c 'while :; do sleep 100 & done' </dev/null >/dev/null 2>&1 & )
		( ( setsid nohup sleep 999 </dev/null >/dev/null 2>&1 & ) & )
		exec sleep 999`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: s.uid, Gid: s.uid, Groups: []uint32{}}, Setsid: true}
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if !wait.Until(wait.Long, func() bool { return len(procsOf(s.uid)) >= 50 }) {
		t.Fatalf("only %d processes started", len(procsOf(s.uid)))
	}
	start := time.Now()
	if err := sb.KillAll(context.Background(), s.uid); err != nil {
		t.Fatal(err)
	}
	t.Logf("KillAll took %s", time.Since(start))
	if left := procsOf(s.uid); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

func TestStartOnATerminal(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	term := openPTY(t)
	spec := sandbox.Spec{UID: s.uid, GID: s.uid, Dir: s.dir, Home: s.home, TTY: term.slave,
		Argv: []string{"/bin/bash", "--noprofile", "--norc", "-i"}, ExtraEnv: []string{"TERM=xterm"}}
	p, err := sb.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	term.slave.Close()
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()

	term.write(t, "echo uid=$(id -u) tty=$(tty) term=$TERM; (setsid sleep 999 &); nohup sleep 998 >/dev/null 2>&1 &\n")
	term.expect(t, fmt.Sprintf("uid=%d tty=/dev/console", s.uid))
	term.expect(t, "term=xterm")
	term.write(t, "echo $PPID > ppid; exit 3\n")
	select {
	case err := <-waited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("Wait = %v, want exit status 3", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not end")
	}
	// The shell's parent is its init helper, PID 1 of its namespace.
	if ppid, _ := os.ReadFile(s.dir + "/ppid"); strings.TrimSpace(string(ppid)) != "1" {
		t.Errorf("the shell's parent inside is %s, want 1", ppid)
	}
	// What the shell left behind ended with it, in its namespace.
	if left := procsOf(s.uid); len(left) > 0 {
		t.Errorf("left after the shell's end: %v", left)
	}

	// KillAll ends a running shell and what it started.
	term2 := openPTY(t)
	spec.TTY = term2.slave
	p2, err := sb.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	term2.slave.Close()
	go func() { waited <- p2.Wait() }()
	term2.write(t, "(setsid sleep 999 &); echo READY\n")
	term2.expect(t, "READY")
	if err := sb.KillAll(context.Background(), s.uid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("Wait = %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not end")
	}
	if left := procsOf(s.uid); len(left) > 0 {
		t.Errorf("left after KillAll: %v", left)
	}

	if _, err := sb.Start(s.spec("true")); !errors.Is(err, sandbox.ErrBadSpec) {
		t.Errorf("Start without a TTY: err = %v", err)
	}
}

// pty is a pseudo-terminal whose output a goroutine collects.
type pty struct {
	master, slave *os.File
	mu            sync.Mutex
	out           bytes.Buffer
	done          chan struct{}
}

func openPTY(t *testing.T) *pty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	})
	if ierr != nil {
		t.Fatal(ierr)
	}
	sl, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &pty{master: m, slave: sl, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		sl.Close()
		m.Close()
		<-p.done
	})
	return p
}

func (p *pty) write(t *testing.T, s string) {
	t.Helper()
	if _, err := p.master.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func (p *pty) expect(t *testing.T, want string) {
	t.Helper()
	ok := wait.Until(wait.Long, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return strings.Contains(p.out.String(), want)
	})
	if !ok {
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("no %q in the terminal's output:\n%s", want, p.out.String())
	}
}
