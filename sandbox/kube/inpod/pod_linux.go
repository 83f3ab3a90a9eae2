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
	"syscall"

	"golang.org/x/sys/unix"
)

// idleVerb is a container's main process, its PID 1, which runs nothing
// of its own accord: the kernel hands it every orphan of the container,
// which it reaps. Plain, it ends at SIGTERM, so that a deleted pod goes at
// once (PID 1 has no default action for it). With -supervise it is the
// commands' container's: it runs the commands the exec'd helpers hand it
// (see supervisor) and no catchable signal ends it, since the commands
// may send it any; a deleted pod's runtime kills it after the pod's grace.
func idleVerb(args []string, stderr io.Writer) error {
	flags := flag.NewFlagSet("idle", flag.ContinueOnError)
	flags.SetOutput(stderr)
	supervise := flags.Bool("supervise", false, "run the commands that run -supervised hands over")
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	// Orphans come to it even when it is not PID 1 (a pod sharing its
	// process namespace).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("inpod: idle: become a subreaper: %w", err)
	}
	sigs := make(chan os.Signal, 64)
	ends := map[os.Signal]bool{syscall.SIGTERM: true, syscall.SIGINT: true}
	reap := func() {
		for {
			if pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil); pid <= 0 || err != nil {
				return
			}
		}
	}
	if *supervise {
		l, err := listenSupervisor()
		if err != nil {
			return err
		}
		defer unix.Close(l)
		// Notified, not ignored: an ignored signal would stay ignored in
		// the commands it starts.
		signal.Notify(sigs, catchable()...)
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return fmt.Errorf("inpod: idle: %w", err)
		}
		ends = nil
		sup := &supervisor{}
		reap = sup.reap
		go sup.serve(l)
	} else {
		signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	}
	defer signal.Stop(sigs)
	// The pod's log says it is up; from here the signals above are its.
	fmt.Fprintln(stderr, "atelier sandbox-pod: idle, commands come by exec")
	for {
		reap()
		if sig := <-sigs; ends[sig] {
			return nil
		}
	}
}

// killallVerb ends every process of the pod it may signal, but PID 1 and
// itself, and reports in a KillStatus how many it could not.
func killallVerb(args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("killall", flag.ContinueOnError)
	flags.SetOutput(stderr)
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	if os.Getuid() == 0 {
		// In a pod it never is (the pod runs as non-root); as root on a
		// host it would end every process of the host.
		return errors.New("inpod: killall refuses to run as root")
	}
	self := os.Getpid()
	left := killLoop(func() []proc {
		var out []proc
		for _, p := range procs() {
			if p.pid != 1 && p.pid != self {
				out = append(out, p)
			}
		}
		return out
	}, 0)
	fw := newFrameWriter(stdout, false)
	if err := fw.json(FrameStatus, KillStatus{Left: left}); err != nil {
		return err
	}
	return fw.flush()
}

// shellVerb runs an interactive bash in root on the exec stream's
// terminal and returns its exit code once it and everything it started
// have ended: at its exit, or when the terminal goes (the stream closed,
// which the pod's runtime turns into a hang-up), as a local shell's
// namespace goes with it.
func shellVerb(args []string, stderr io.Writer) (int, error) {
	flags := flag.NewFlagSet("shell", flag.ContinueOnError)
	flags.SetOutput(stderr)
	root := flags.String("root", "/workspace", "where the shell starts")
	if err := flags.Parse(args); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("inpod: shell: become a subreaper: %w", err)
	}
	hangup := make(chan os.Signal, 1)
	signal.Notify(hangup, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(hangup)
	shell := exec.Command("/bin/bash", "-i")
	shell.Dir = *root
	shell.Env = environ(os.Environ(), "xterm-256color")
	shell.Stdin, shell.Stdout, shell.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := shell.Start(); err != nil {
		return 0, fmt.Errorf("inpod: shell: %w", err)
	}
	ended := make(chan struct{})
	go func() {
		select {
		case <-hangup:
			killTree(shell.Process.Pid)
		case <-ended:
		}
	}()
	err := shell.Wait()
	close(ended)
	killTree(0)
	var exited *exec.ExitError
	switch {
	case errors.As(err, &exited):
		if ws, ok := exited.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exited.ExitCode(), nil
	case err != nil:
		return 0, fmt.Errorf("inpod: shell: %w", err)
	}
	return 0, nil
}
