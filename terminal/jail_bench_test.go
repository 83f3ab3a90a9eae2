//go:build linux

package terminal

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
)

// jail is one session's sandbox for the jailed benchmarks: shells started
// the way an edit session starts them, as the session's uid in a jail with
// the checkout at /workspace.
type jail struct {
	sb             *sandbox.Sandbox
	uid            uint32
	dir, home, tmp string
}

func newJail(b *testing.B) *jail {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("precondition: root, since a jailed shell switches to a session's uid and builds namespaces")
	}
	// A block of uids of this binary's own, away from the sandbox's and
	// the server's tests.
	base := uint32(3_500_000_000 + rand.N(100_000)*1000)
	sb, err := sandbox.New(sandbox.Config{UIDBase: base, UIDCount: 1000})
	if err != nil {
		b.Fatal(err)
	}
	if err := sb.Unavailable(); err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	for _, p := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(p, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	j := &jail{sb: sb, uid: base + 1, dir: filepath.Join(root, "checkout"), home: filepath.Join(root, "home"), tmp: filepath.Join(root, "tmp")}
	for _, d := range []string{j.dir, j.home, j.tmp} {
		if err := sandbox.PrepareDir(d, j.uid, j.uid); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		if err := sb.KillAll(context.Background(), j.uid); err != nil {
			b.Error(err)
		}
		sb.Close()
	})
	return j
}

// bash launches script in the jail, with the network denied, on a PTY
// whose slave is the session's uid's, as an edit session's shell.
func (j *jail) bash(script string) Launcher {
	return owned{uid: int(j.uid), gid: int(j.uid), start: func(tty *os.File) (Process, error) {
		p, err := j.sb.Start(sandbox.Spec{
			UID: j.uid, GID: j.uid, Workspace: j.dir, Dir: j.dir, Home: j.home, Tmp: j.tmp,
			Argv:     []string{"/bin/bash", "--noprofile", "--norc", "-c", script},
			ExtraEnv: []string{"TERM=xterm"}, Network: sandbox.Deny, TTY: tty,
		})
		if err != nil {
			return nil, err
		}
		return jailedProcess{p}, nil
	}}
}

type jailedProcess struct{ p *sandbox.Process }

func (jp jailedProcess) Pid() int { return jp.p.Pid() }

func (jp jailedProcess) Wait() (Exit, error) {
	err := jp.p.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return Exit{Code: -1, Signal: unix.SignalName(ws.Signal())}, nil
		}
		return Exit{Code: ee.ExitCode()}, nil
	}
	if err != nil {
		return Exit{Code: -1}, err
	}
	return Exit{}, nil
}
