//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunPlain runs argv without a sandbox, as the test's own user, through
// the one runner Sandbox.Run uses, so the runner's rules (limits, output,
// timeouts, the kill of what is left) are tested apart from the jail. env
// is the whole environment. The command starts a session of its own; when
// it ends, or is stopped, every process of that session and its process
// group is killed.
func RunPlain(ctx context.Context, argv []string, dir string, env []string, lim Limits) (*Result, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: fmt.Errorf("%w: no command", ErrBadSpec)}
	}
	return run(ctx, lim, nil, func(stdout, stderr *os.File) (*exec.Cmd, tree, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = append([]string{}, env...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		return cmd, sessionTree(cmd.Process.Pid), nil
	})
}

// sessionTree is a plain command's tree: its session and process group,
// both named by the main process's pid (Setsid).
type sessionTree int

func (t sessionTree) signal(sig unix.Signal) {
	pid := int(t)
	unix.Kill(pid, sig)
	unix.Kill(-pid, sig)
	scanProcs(func(p int) {
		signalIf(p, sig, func() (bool, bool) { return inSession(p, pid) })
	})
}

func (t sessionTree) kill(ctx context.Context) error {
	pid := int(t)
	return killLoop(ctx, func() (int, error) {
		unix.Kill(-pid, unix.SIGKILL)
		live := 0
		err := scanProcs(func(p int) {
			if signalIf(p, unix.SIGKILL, func() (bool, bool) { return inSession(p, pid) }) {
				live++
			}
		})
		return live, err
	}, fmt.Sprintf("session %d", pid))
}

// inSession reports whether process pid is in session sid and alive.
func inSession(pid, sid int) (ok, live bool) {
	state, s, found := statOf(pid)
	if !found || s != sid {
		return false, false
	}
	return true, alive(state)
}
