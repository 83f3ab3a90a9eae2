package workbench

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

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

// RunCheck runs command on a fresh checkout of commit of repo, under the
// rules of a session's command: a slot of the instance, the project's
// sandbox meter, the jail, the project's network policy, the timeout and
// the output tails. Checks run one at a time on an instance, as the check
// user; everything of the check is removed when it ends. key names the
// check to the provider.
func (r *Runtime) RunCheck(ctx context.Context, p *models.Project, repo *gitsvc.Repo, commit, command string, key int64) (*CheckResult, error) {
	release, err := r.slots.take(nobody)
	if err != nil {
		return nil, err
	}
	defer release()
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	// No Cache: the check's HOME/.cache is as new as its HOME. The
	// project's cache holds what sessions' own code wrote, and a planted
	// entry there (a test result Go would report "(cached)", an object file
	// swapped for one of the same size) would be taken for a build's own
	// result: the evidence must be what a clean build gives. A copy-on-write
	// view of the cache would keep the check's writes out of it, not the
	// planted entries out of the check.
	check := sandbox.Session{ID: checkSandbox + strconv.FormatInt(key, 10), ProjectID: p.ID, UID: r.CheckUID(),
		Network: sandbox.Network(p.SandboxNetwork)}
	if err := r.sb.Provider.End(ctx, check); err != nil { // a check a crash left
		return nil, err
	}
	defer func() {
		if err := r.sb.Provider.End(context.WithoutCancel(ctx), check); err != nil {
			r.log.Warn("check not all removed", "check", check.ID, "err", err)
		}
	}()
	if _, err := r.sb.Provider.Prepare(ctx, check, gitBase{git: r.git, repo: repo, commit: commit}); err != nil {
		return nil, err
	}

	res, err := r.reserve(ctx, p.ID) // as a command's
	if err != nil {
		return nil, err
	}
	start := r.now()
	out, runErr := r.sb.Provider.Run(ctx, check, sandbox.Command{Argv: sandbox.CommandArgv(command), NoneAfter: true,
		Limits: sandbox.Limits{Timeout: CommandTimeout, MaxStream: CommandTail, Tail: true, TimeoutExit: 124}})
	end := r.now()
	if _, err := r.sb.Meter.Settle(context.WithoutCancel(ctx), res, start, end); err != nil {
		r.log.Error("sandbox time of a check not settled", "check", check.ID, "err", err)
	}
	if runErr != nil {
		return nil, runErr
	}
	output := append(append([]byte{}, out.Stdout...), out.Stderr...)
	return &CheckResult{ExitCode: out.ExitCode, DurationMS: out.Duration.Milliseconds(), Output: output}, nil
}

// checkSandbox and the Change's id name a check's sandbox.
const checkSandbox = "check-"

// SandboxesInUse answers, for a provider that reaps what no instance
// holds (the kube provider's pods), which of ids name a sandbox still in
// use: an open edit session's, or the check of a Change being verified.
func SandboxesInUse(db *models.Store) func(ctx context.Context, ids []string) (map[string]bool, error) {
	return func(ctx context.Context, ids []string) (map[string]bool, error) {
		var sessions []string
		checks := map[int64]string{}
		for _, id := range ids {
			if n, err := strconv.ParseInt(strings.TrimPrefix(id, checkSandbox), 10, 64); err == nil && strings.HasPrefix(id, checkSandbox) {
				checks[n] = id
			} else {
				sessions = append(sessions, id)
			}
		}
		inUse, err := db.OpenSessionIDs(ctx, sessions)
		if err != nil {
			return nil, err
		}
		verifying, err := db.VerifyingChanges(ctx, slices.Collect(maps.Keys(checks)))
		if err != nil {
			return nil, err
		}
		for n, id := range checks {
			inUse[id] = verifying[n]
		}
		return inUse, nil
	}
}
