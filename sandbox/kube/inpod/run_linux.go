//go:build linux

package inpod

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// pipeGrace is how long output may still come once every process of
	// the command is dead (see drain).
	pipeGrace = time.Second
	// mainGrace bounds the wait for the killed main process's status.
	mainGrace = 5 * time.Second
)

type runOptions struct {
	root, dir              string
	timeout                time.Duration
	maxStream, maxCombined int64
	tail                   bool
	hold                   bool
	supervised             bool
	argv                   []string
}

func parseRun(args []string, stderr io.Writer) (runOptions, error) {
	flags := flag.NewFlagSet("run", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var o runOptions
	flags.StringVar(&o.root, "root", "/workspace", "the workspace")
	flags.StringVar(&o.dir, "dir", "", "the folder to run in, relative to -root")
	flags.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long the command may run")
	flags.Int64Var(&o.maxStream, "max-stream", 0, "bytes of one stream (0: no bound)")
	flags.Int64Var(&o.maxCombined, "max-combined", 0, "bytes of both streams (0: no bound)")
	flags.BoolVar(&o.tail, "tail", false, "carry on past the bounds, marking the streams truncated")
	flags.BoolVar(&o.hold, "hold", false, "end the command when the input ends (the server holds it open while it waits)")
	flags.BoolVar(&o.supervised, "supervised", false, "hand the command to the container's main process (idle -supervise), out of its reach")
	if err := flags.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	o.argv = flags.Args()
	if len(o.argv) == 0 || o.argv[0] == "" {
		return o, fmt.Errorf("%w: run: no command", ErrBadArgs)
	}
	if o.timeout <= 0 || o.maxStream < 0 || o.maxCombined < 0 {
		return o, fmt.Errorf("%w: run: negative bound", ErrBadArgs)
	}
	dir, err := cleanRel(o.dir)
	if err != nil {
		return o, fmt.Errorf("inpod: run: -dir: %w", err)
	}
	o.dir = dir
	return o, nil
}

func runVerb(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	if o.supervised {
		// A pod whose main process does not supervise (made by an
		// earlier version of the server) runs the command here, as then.
		if err := runSupervised(args); !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
	}
	// What the command daemonizes (double fork, setsid) is reparented to
	// the helper rather than to the pod's init, so the kill below finds
	// it among the helper's descendants.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("inpod: run: become a subreaper: %w", err)
	}
	// A server that went away must show as a failed write, which kills
	// the command, not as a SIGPIPE that kills the helper and leaves the
	// command running. Notify, not Ignore: an ignored signal stays
	// ignored in the command.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	fw := newFrameWriter(stdout, true)
	st := runCommand(o, stdin, fw, nil)
	if err := fw.json(FrameStatus, st); err != nil {
		return err
	}
	return fw.flush()
}

// runCommand runs o.argv, forwarding its output to fw, and returns once
// every process it started is dead. Under a supervisor (the container's
// main process) it leaves the command's main process to it to spare from
// its reaping, and the signals to it to ignore.
func runCommand(o runOptions, stdin io.Reader, fw *frameWriter, sup *supervisor) RunStatus {
	outR, outW, err := os.Pipe()
	if err != nil {
		return RunStatus{Exit: -1, Error: fmt.Sprintf("inpod: run: pipe: %v", err)}
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return RunStatus{Exit: -1, Error: fmt.Sprintf("inpod: run: pipe: %v", err)}
	}
	defer errR.Close()

	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Dir = filepath.Join(o.root, filepath.FromSlash(o.dir))
	cmd.Env = environ(os.Environ(), "dumb")
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if sup != nil {
		err = sup.start(cmd)
	} else {
		err = cmd.Start()
	}
	outW.Close()
	errW.Close()
	if err != nil {
		return RunStatus{Exit: -1, Error: fmt.Sprintf("inpod: run: start: %v", err)}
	}

	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	sigs := make(chan os.Signal, 1)
	if sup == nil {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		defer signal.Stop(sigs)
	}
	if o.hold {
		// Kubernetes exec tells the helper of a server gone by closing its
		// input, even when the command is silent and no write can fail.
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			halt()
		}()
	}

	c := &counter{opt: o}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); forward(outR, FrameStdout, 0, c, fw, halt) }()
	go func() { defer readers.Done(); forward(errR, FrameStderr, 1, c, fw, halt) }()

	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if sup != nil {
			sup.waited()
		}
		close(exited)
	}()

	var st RunStatus
	timer := time.NewTimer(o.timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		st.TimedOut = true
	case <-stop: // over a bound, or the server has gone
	case <-sigs:
	}
	mainDone := true
	select {
	case <-exited:
	default:
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		killTree(cmd.Process.Pid)
		select {
		case <-exited:
		case <-time.After(mainGrace):
			mainDone = false
		}
	}
	st.DurationNs = int64(time.Since(start))
	st.Left = killTree(0)
	drain(&readers, outR, errR)

	st.Exit = -1
	if !mainDone {
		st.Left = max(st.Left, 1)
	} else if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			st.Signal = ws.Signal().String()
		} else {
			st.Exit = ws.ExitStatus()
		}
	}
	st.Overflow = c.overflowed()
	st.StdoutTruncated, st.StderrTruncated = c.truncated(0), c.truncated(1)
	return st
}

// drain waits for the readers to forward what is left in the pipes, once
// every process of the command is dead, but cuts the pipes after
// pipeGrace: only a process that is not the command's, handed a pipe
// over a unix socket, still holds them then.
func drain(readers *sync.WaitGroup, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(pipeGrace):
		for _, p := range pipes {
			_ = p.SetReadDeadline(time.Now())
		}
		<-done
	}
}

// forward sends what r gives as frames of kind, as far as the bounds
// allow, and calls halt when they end the command or the server has gone.
func forward(r *os.File, kind byte, stream int, c *counter, fw *frameWriter, halt func()) {
	buf := make([]byte, MaxChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			send, over := c.admit(stream, n)
			if send > 0 && fw.frame(kind, buf[:send]) != nil {
				halt()
				return
			}
			if over {
				halt()
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				halt()
			}
			return
		}
	}
}

// counter applies the output bounds, with sandbox.Limits' meaning.
type counter struct {
	opt   runOptions
	mu    sync.Mutex
	total [2]int64 // written by the command
	sent  [2]int64 // forwarded
	over  bool
}

// admit counts n more bytes of stream and says how many of them to
// forward, and whether the command is over a bound it must not pass.
func (c *counter) admit(stream, n int) (send int, over bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total[stream] += int64(n)
	if c.over {
		return 0, true
	}
	if c.opt.tail {
		c.sent[stream] += int64(n)
		return n, false
	}
	room := int64(n)
	if c.opt.maxStream > 0 {
		room = min(room, c.opt.maxStream-c.sent[stream])
	}
	if c.opt.maxCombined > 0 {
		room = min(room, c.opt.maxCombined-c.sent[0]-c.sent[1])
	}
	room = max(room, 0)
	c.sent[stream] += room
	if room < int64(n) {
		c.over = true
	}
	return int(room), c.over
}

func (c *counter) overflowed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.over
}

// truncated says whether the server holds less of stream than the
// command wrote: in tail mode, when it wrote more than -max-stream.
func (c *counter) truncated(stream int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opt.tail {
		return c.opt.maxStream > 0 && c.total[stream] > c.opt.maxStream
	}
	return c.total[stream] > c.sent[stream]
}
