package editsession

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/sandbox"
)

// CheckResult is one run of a project's check command.
type CheckResult struct {
	ExitCode   int
	DurationMS int64
	// Output is the tail of stdout and then stderr, each at most
	// CommandTail bytes.
	Output []byte
}

// CheckUID is the sandbox user checks run as: the last uid of the block,
// kept out of the sessions' draw (Config.SandboxSlots is one less).
func (r *Runtime) CheckUID() uint32 { return r.sb.UIDBase + r.sb.UIDCount - 1 }

// RunCheck runs command on a fresh export of commit of repo, under the
// rules of a session's command: a slot of the instance, the project's
// sandbox meter, the jail, the project's network policy, the timeout and
// the output tails. Checks run one at a time on an instance, as the check
// user; everything of the check is removed when it ends. key names the
// check's folder and disk.
func (r *Runtime) RunCheck(ctx context.Context, p *models.Project, repo *gitsvc.Repo, commit, command string, key int64) (*CheckResult, error) {
	release, err := r.takeSlot()
	if err != nil {
		return nil, err
	}
	defer release()
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	uid := r.CheckUID()

	id := "check-" + strconv.FormatInt(key, 10)
	top, err := r.sessionFolder(p, id)
	if err != nil {
		return nil, err
	}
	if err := r.sb.Box.KillAll(ctx, uid); err != nil { // a check a crash left
		return nil, err
	}
	if err := r.removeSessionFolder(top, id); err != nil {
		return nil, err
	}
	if err := r.openSessionFolder(top, id); err != nil {
		return nil, err
	}
	defer func() {
		kctx := context.WithoutCancel(ctx)
		if err := r.sb.Box.KillAll(kctx, uid); err != nil {
			r.log.Warn("check processes not all ended", "check", id, "err", err)
		}
		if err := r.removeSessionFolder(top, id); err != nil {
			r.log.Warn("check folder not removed", "check", id, "err", err)
		}
	}()
	dir, home, tmp := filepath.Join(top, "checkout"), filepath.Join(top, "home"), filepath.Join(top, "tmp")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("editsession: check folder: %w", err)
	}
	if err := r.git.Export(ctx, repo, commit, dir); err != nil {
		return nil, err
	}
	if err := chownTree(dir, uid, uid); err != nil {
		return nil, err
	}
	for _, d := range []string{home, tmp} {
		if err := sandbox.PrepareDir(d, uid, uid); err != nil {
			return nil, err
		}
	}

	res, err := r.sb.Meter.Reserve(ctx, p.ID, r.sb.Instance)
	if err != nil {
		return nil, err
	}
	start := r.now()
	out, runErr := r.sb.Box.Run(ctx, sandbox.Spec{
		UID: uid, GID: uid, Workspace: dir, Dir: dir, Home: home, Tmp: tmp,
		Argv:    []string{"/bin/bash", "--noprofile", "--norc", "-c", command},
		Network: sandbox.Network(p.SandboxNetwork),
	}, sandbox.Limits{Timeout: CommandTimeout, MaxStream: CommandTail, Tail: true, TimeoutExit: 124})
	end := r.now()
	if _, err := r.sb.Meter.Settle(context.WithoutCancel(ctx), res, start, end); err != nil {
		r.log.Error("sandbox time of a check not settled", "check", id, "err", err)
	}
	if runErr != nil {
		return nil, runErr
	}
	output := append(append([]byte{}, out.Stdout...), out.Stderr...)
	return &CheckResult{ExitCode: out.ExitCode, DurationMS: out.Duration.Milliseconds(), Output: output}, nil
}
