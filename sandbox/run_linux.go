//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// termGrace is how long a command has between SIGTERM and SIGKILL
	// when it is stopped early.
	termGrace = time.Second
	// killWait bounds the kill of a command's processes after it ends.
	killWait = 10 * time.Second
	// drainWait bounds the wait for the output pipes to close once every
	// process of the command is gone.
	drainWait = 2 * time.Second
)

// errPipesOpen: the output pipes stayed open after the command's processes
// were killed, so something outside its tree holds them.
var errPipesOpen = errors.New("output pipes still open after the kill")

// tree is every process a command may leave behind and how to end them.
type tree interface {
	// signal sends sig to the main process and to the rest of the tree.
	signal(sig unix.Signal)
	// kill sends SIGKILL until no live process of the tree is left; it
	// fails when ctx ends first.
	kill(ctx context.Context) error
}

// signalReporter is a tree that knows, once its main process has been
// reaped, which signal ended the command (0 for none). It is asked once,
// also when the answer is not wanted, so it can let go of what it holds.
type signalReporter interface {
	signaled(wanted bool) syscall.Signal
}

// starter starts a command writing to stdout and stderr.
type starter func(stdout, stderr *os.File) (*exec.Cmd, tree, error)

// run is the one runner: it starts a command, collects its output within
// lim (and hands every byte to live as it comes, when live is not nil), stops it at the timeout, on ctx's end or on overflow (SIGTERM, then
// SIGKILL after termGrace), and after the main process has exited kills
// whatever of its tree is left, so a background child holding the output
// pipes cannot keep it waiting.
func run(ctx context.Context, lim Limits, live io.Writer, start starter) (*Result, error) {
	lim = lim.WithDefaults()
	if err := ctx.Err(); err != nil {
		return nil, &RunError{Kind: Canceled, Partial: Result{ExitCode: -1}, Err: context.Cause(ctx)}
	}
	began := time.Now()
	c := newCapture(lim, live)

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: err}
	}
	cmd, tr, err := start(outW, errW)
	// The child has its own copies; ours would keep the pipes open.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1, Duration: time.Since(began)}, Err: err}
	}

	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); c.drain(outR, &c.out) }()
	go func() { defer readers.Done(); c.drain(errR, &c.err) }()
	exited := make(chan struct{})
	go func() { defer close(exited); waitExited(cmd.Process.Pid) }()

	timer := time.NewTimer(lim.Timeout)
	defer timer.Stop()
	var kind ErrKind
	var cause error
	select {
	case <-exited:
	case <-timer.C:
		kind, cause = Timeout, fmt.Errorf("%w after %s", context.DeadlineExceeded, lim.Timeout)
	case <-ctx.Done():
		select {
		case <-exited:
			// It ended on its own as the cancel came: its own exit is
			// the truth, not a cancel that stopped nothing.
		default:
			kind, cause = Canceled, context.Cause(ctx)
		}
	case <-c.overflowed():
		kind, cause = Overflow, overflowError(lim)
	}
	var cleanupErr error
	if kind != 0 {
		cleanupErr = stop(tr, exited)
	}
	dur := time.Since(began)

	// The main process has exited but is not reaped yet, so its pid (the
	// session id of a plain command) cannot be reused during the kill.
	kctx, cancel := context.WithTimeout(context.Background(), killWait)
	cleanupErr = errors.Join(cleanupErr, tr.kill(kctx))
	cancel()
	reaped := false
	select {
	case <-exited:
		cmd.Wait()
		reaped = true
	default:
		// Unkillable (stuck in the kernel): reap it whenever it goes.
		go cmd.Wait()
	}

	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainWait):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-drained
		cleanupErr = errors.Join(cleanupErr, errPipesOpen)
	}
	outR.Close()
	errR.Close()

	res := Result{ExitCode: -1, Duration: dur}
	c.fill(&res)
	if st := cmd.ProcessState; reaped && st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal().String()
		} else {
			res.ExitCode = st.ExitCode()
		}
	}
	if sr, ok := tr.(signalReporter); ok {
		// The init helper of a jail exits with 128+n for a command that
		// died of signal n, and says n.
		if sig := sr.signaled(reaped && res.Signal == ""); sig != 0 {
			res.ExitCode, res.Signal = -1, sig.String()
		}
	}
	if kind == 0 && c.didOverflow() {
		// The last output came after the main process exited.
		kind, cause = Overflow, overflowError(lim)
	}
	switch {
	case cleanupErr != nil:
		// Leftover processes matter more than why the command stopped.
		res.TimedOut = kind == Timeout
		return nil, &RunError{Kind: Cleanup, Partial: res, Err: cleanupErr}
	case kind == Timeout && lim.TimeoutExit > 0:
		res.ExitCode, res.TimedOut = lim.TimeoutExit, true
		return &res, nil
	case kind != 0:
		return nil, &RunError{Kind: kind, Partial: res, Err: cause}
	}
	return &res, nil
}

func overflowError(lim Limits) error {
	if lim.MaxCombined > 0 {
		return fmt.Errorf("more than %d bytes in a stream or %d in both", lim.MaxStream, lim.MaxCombined)
	}
	return fmt.Errorf("more than %d bytes in a stream", lim.MaxStream)
}

// stop ends a command early: SIGTERM to its tree, then after termGrace, or
// as soon as the main process is gone, SIGKILL to all of it.
func stop(tr tree, exited <-chan struct{}) error {
	tr.signal(unix.SIGTERM)
	grace := time.NewTimer(termGrace)
	defer grace.Stop()
	select {
	case <-exited:
	case <-grace.C:
	}
	tr.signal(unix.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(killWait):
		return errors.New("the main process did not die of SIGKILL")
	}
}

// waitExited blocks until process pid has exited, without reaping it.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}
