package editsession

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"atelier/events"
	"atelier/fault"
	"atelier/meter"
	"atelier/models"
	"atelier/sandbox"
	"atelier/workspace"
)

// Command limits (ADR 0029).
const (
	CommandTimeout = 120 * time.Second
	CommandTail    = 64 << 10
	// maxNotes bounds the notes of one command; a build that writes
	// thousands of files gets a count instead of thousands of lines.
	maxNotes = 50
	// busyRetry is when a command refused for a full instance should be
	// tried again: about the time a short command takes.
	busyRetry = 5 * time.Second
)

// ErrSandboxBusy: the instance runs as many commands as it may at once.
var ErrSandboxBusy = fault.WithRetryAfter(fault.New(fault.Limit, "sandbox_busy",
	"editsession: the server runs as many commands as it may at once",
	"The server runs as many commands as it may at once; try again in a few seconds."), busyRetry)

// ErrNoRunningCommand: a cancel found no command of the session running.
var ErrNoRunningCommand = fault.New(fault.Conflict, "no_running_command",
	"editsession: no command of this session is running", "No command of this session is running.")

// errCanceledByPerson is the cause a command's context ends with when its
// session's owner cancels it, told apart from a request that went away.
var errCanceledByPerson = errors.New("editsession: command canceled by its session's owner")

// CommandResult is what a command did, as the person sees it.
type CommandResult struct {
	ExitCode int `json:"exitCode"`
	// Canceled says the session's owner stopped the command; the output
	// is what it wrote until then.
	Canceled        bool     `json:"canceled"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutTruncated bool     `json:"stdoutTruncated"`
	StderrTruncated bool     `json:"stderrTruncated"`
	DurationMS      int64    `json:"durationMs"`
	Notes           []string `json:"notes"`
}

// RunCommand runs command in folder of the session's checkout as the
// session's user, then turns what it changed into edits. It reserves
// sandbox time first and settles it after, and audits the command.
func (r *Runtime) RunCommand(ctx context.Context, sess *Session, command, folder string) (*CommandResult, error) {
	if err := workspace.CheckRelDir(folder); err != nil {
		return nil, err
	}
	if strings.TrimSpace(command) == "" {
		return nil, ErrEmptyCommand
	}
	uid, err := r.uid(sess.CodeSession)
	if err != nil {
		return nil, err
	}
	// The slot is taken before the session's lock, so that commands
	// queued behind their session's earlier one count too: a flood from
	// one session is refused instead of piling up.
	release, err := r.takeSlot()
	if err != nil {
		return nil, err
	}
	defer release()
	r.admitted.Add(1)
	defer r.admitted.Add(-1)
	unlock := r.checkouts.lock(sess.ID)
	defer unlock()

	res, err := r.sb.Meter.Reserve(ctx, sess.ProjectID, r.sb.Instance)
	if err != nil {
		return nil, err
	}
	start := r.now()
	// CancelCommands ends runCtx; the sandbox's runner then stops the
	// command as it would at a timeout.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := r.commands.add(&RunningCommand{SessionID: sess.ID, ProjectID: sess.ProjectID, Project: sess.Project.Name,
		UserID: sess.UserID, Command: command, Folder: folder, StartedAt: start, cancel: cancel})
	r.hint(events.TopicCommands)
	defer r.hint(events.TopicCommands) // after the audit row, or the failure
	out, runErr := r.runInCheckout(runCtx, sess, uid, command, folder)
	end := r.now()
	done()
	// Settling and the audit row are independent: they go to the
	// database side by side, and the answer waits for both.
	var settled sync.WaitGroup
	defer settled.Wait()
	settled.Go(func() {
		if _, err := r.sb.Meter.Settle(context.WithoutCancel(ctx), res, start, end); err != nil {
			r.log.Error("sandbox time not settled", "session", sess.ID, "err", err)
		}
	})
	if runErr != nil {
		return nil, runErr
	}
	if r.sb.Observer != nil {
		r.sb.Observer.CommandRan(out.ExitCode, time.Duration(out.DurationMS)*time.Millisecond)
	}
	audit := &models.SessionCommand{SessionID: sess.ID, Command: command, Folder: folder,
		ExitCode: out.ExitCode, Canceled: out.Canceled, DurationMS: out.DurationMS, StartedAt: start}
	if err := r.db.AddSessionCommand(ctx, audit); err != nil {
		return nil, err
	}
	return out, nil
}

// CancelCommands stops the commands of sess running on this instance and
// answers how many it stopped, or ErrNoRunningCommand. Each one's
// RunCommand then returns a result with Canceled set.
func (r *Runtime) CancelCommands(sess *Session) (int, error) {
	n := 0
	r.commands.mu.Lock()
	for c := range r.commands.all {
		if c.SessionID == sess.ID && c.cancel != nil {
			c.cancel(errCanceledByPerson)
			n++
		}
	}
	r.commands.mu.Unlock()
	if n == 0 {
		return 0, ErrNoRunningCommand
	}
	return n, nil
}

// CommandsHeld is how many commands this instance holds: running, or
// waiting for their session's earlier command (the count
// Sandboxes.MaxRunning bounds).
func (r *Runtime) CommandsHeld() int { return int(r.admitted.Load()) }

// takeSlot takes one of the instance's slots for commands, or answers
// ErrSandboxBusy when none is free: a command is never queued behind other
// sessions' commands.
func (r *Runtime) takeSlot() (release func(), err error) {
	if r.running == nil {
		return func() {}, nil
	}
	select {
	case r.running <- struct{}{}:
		return func() { <-r.running }, nil
	default:
		return nil, ErrSandboxBusy
	}
}

func (r *Runtime) runInCheckout(ctx context.Context, sess *Session, uid uint32, command, folder string) (*CommandResult, error) {
	co, err := r.checkoutFor(ctx, sess, uid)
	if err != nil {
		return nil, err
	}
	dir := co.dir
	if folder != "" {
		dir = filepath.Join(co.dir, folder)
	}
	network := sandbox.Network(sess.Project.SandboxNetwork)
	// A helper started ahead runs this one, and the next ones' start up
	// while this one runs.
	spare := co.takeSpare()
	co.prepareSpares(r.sb.Box, uid, r.log)
	result, err := r.sb.Box.Run(ctx, sandbox.Spec{
		UID: uid, GID: uid, Workspace: co.dir, Dir: dir, Home: co.home, Tmp: co.tmp,
		Argv:    []string{"/bin/bash", "--noprofile", "--norc", "-c", command},
		Network: network, Spare: spare,
	}, sandbox.Limits{Timeout: CommandTimeout, MaxStream: CommandTail, Tail: true, TimeoutExit: 124})
	// Run returns once every process of the command has ended (its PID
	// namespace goes with it); the session's shells live on.
	co.lastUsed = r.now()
	canceled := false
	var runErr *sandbox.RunError
	if errors.Is(err, sandbox.ErrCanceled) && errors.Is(context.Cause(ctx), errCanceledByPerson) && errors.As(err, &runErr) {
		// Stopped on purpose: what it wrote, and what it changed until
		// then, is the result.
		result, err, canceled = &runErr.Partial, nil, true
		ctx = context.WithoutCancel(ctx)
	}
	if err != nil {
		return nil, err
	}
	left, err := r.capture(ctx, sess, co)
	if err != nil {
		return nil, err
	}
	notes := make([]string, len(left))
	for i, l := range left {
		notes[i] = l.Note()
	}
	if len(notes) > maxNotes {
		notes = append(notes[:maxNotes], fmt.Sprintf("and %d more left out", len(notes)-maxNotes))
	}
	stderr := string(result.Stderr)
	for _, n := range notes {
		stderr += "atelier: " + n + "\n"
	}
	return &CommandResult{
		ExitCode: result.ExitCode, Canceled: canceled, Stdout: string(result.Stdout), Stderr: stderr,
		StdoutTruncated: result.StdoutTruncated, StderrTruncated: result.StderrTruncated,
		DurationMS: result.Duration.Milliseconds(), Notes: notes,
	}, nil
}

// historyLength is how many past commands the page lists.
const historyLength = 20

// History returns the session's latest commands and the project's sandbox
// time this month.
func (r *Runtime) History(ctx context.Context, sess *Session) ([]models.SessionCommand, meter.Usage, error) {
	cmds, err := r.db.SessionCommands(ctx, sess.ID, historyLength)
	if err != nil {
		return cmds, meter.Usage{}, err
	}
	usage, err := r.sb.Meter.Usage(ctx, sess.ProjectID)
	return cmds, usage, err
}
