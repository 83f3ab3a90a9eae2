package workbench

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"atelier/editsession"
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
	"workbench: the server runs as many commands as it may at once",
	"The server runs as many commands as it may at once; try again in a few seconds."), busyRetry)

// ErrSandboxBusyPerson: the person holds their share of the instance's
// command slots; the rest are kept for everybody else. Refusals name the
// share (commandSlots.take).
var ErrSandboxBusyPerson = fault.WithRetryAfter(fault.New(fault.Limit, "sandbox_busy_person",
	"workbench: the person runs as many commands at once as one person may",
	"You already run as many commands at once as one person may on this server."), busyRetry)

// ErrNoRunningCommand: a cancel found no command of the session running.
var ErrNoRunningCommand = fault.New(fault.Conflict, "no_running_command",
	"workbench: no command of this session is running", "No command of this session is running.")

// errCanceledByPerson is the cause a command's context ends with when its
// session's owner cancels it, told apart from a request that went away.
var errCanceledByPerson = errors.New("workbench: command canceled by its session's owner")

// errAbandoned is the cause of a command's end when its instance, declared
// gone, lets its sessions go (Abandon).
var errAbandoned = errors.New("workbench: command ended: this instance was declared gone")

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
// sandbox time first, and settles it and audits the command once the
// command is answered (the session's history waits for those). While it
// runs, its output streams to whoever follows CommandOutput.
//
// Once it has started, the command runs to its end (or its timeout, or
// CancelCommands) whether or not ctx ends: a page that reloads follows it
// again instead of killing it.
func (r *Runtime) RunCommand(ctx context.Context, session Session, command, folder string) (res *CommandResult, err error) {
	sess := session.Identity()
	if err := sess.Editable(); err != nil {
		return nil, err
	}
	if err := workspace.CheckRelDir(folder); err != nil {
		return nil, err
	}
	if strings.TrimSpace(command) == "" {
		return nil, editsession.ErrEmptyCommand
	}
	uid, err := r.sandboxUser(sess)
	if err != nil {
		return nil, err
	}
	var stages CommandStages
	clock := startStopwatch()
	// The slot is taken before the session's lock, so that commands
	// queued behind their session's earlier one count too: a flood from
	// one session is refused instead of piling up.
	release, err := r.slots.take(sess.UserID)
	if err != nil {
		return nil, err
	}
	defer release()
	r.admitted.Add(1)
	defer r.admitted.Add(-1)
	unlock := r.checkouts.lock(sess.ID)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return nil, err // nobody waits for it any more, and it has not started
	}
	ctx = context.WithoutCancel(ctx)
	stages.Queued = clock.lap()

	reserved, err := r.reserve(ctx, sess.ProjectID)
	if err != nil {
		return nil, err
	}
	stages.Reserved = clock.lap()
	start := r.now()
	// CancelCommands ends runCtx; the sandbox's runner then stops the
	// command as it would at a timeout.
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Its viewers get the exit event with the answer; a page that then
	// reloads the history finds the command there, as History waits for
	// the session's audit rows under way.
	live := r.commands.follow(sess.ID, r.terms.NewOutput())
	defer func() { live.end(res, err) }()
	done := r.commands.add(&RunningCommand{SessionID: sess.ID, ProjectID: sess.ProjectID, Project: sess.Project.Name,
		UserID: sess.UserID, Command: command, Folder: folder, StartedAt: start, cancel: cancel})
	r.hint(events.TopicCommands)
	out, runErr := r.runInCheckout(runCtx, sess, uid, command, folder, live.out, &stages, &clock)
	end := r.now()
	done()
	var unrun *sandboxNotRun
	ran := !errors.As(runErr, &unrun)
	r.settleAfterAnswer(ctx, sess, reserved, ran, start, end)
	if runErr != nil {
		r.hint(events.TopicCommands)
		return nil, runErr
	}
	// The session's earlier row is written first (it began before this
	// command's run, so this wait is all but never felt), keeping the
	// rows in the commands' order.
	_ = r.audits.wait(ctx, sess.ID) // ctx does not end: it is the request's without its cancellation
	audited := r.audits.begin(sess.ID)
	go func() {
		defer audited()
		defer r.hint(events.TopicCommands) // the dashboard lists the row
		clock := startStopwatch()
		ctx, cancel := context.WithTimeout(ctx, auditTimeout)
		defer cancel()
		err := r.db.AddSessionCommand(ctx, &models.SessionCommand{SessionID: sess.ID, Command: command, Folder: folder,
			ExitCode: out.ExitCode, Canceled: out.Canceled, DurationMS: out.DurationMS, StartedAt: start})
		stages.Recorded = clock.lap()
		if err != nil {
			r.log.Error("command not audited", "session", sess.ID, "command", command, "err", err)
		}
		if r.sb.Observer != nil {
			r.sb.Observer.CommandRan(out.ExitCode, time.Duration(out.DurationMS)*time.Millisecond, stages)
		}
	}()
	return out, nil
}

// auditTimeout bounds the writing of a command's audit row, which nobody
// waits for but the session's history and Close.
const auditTimeout = 30 * time.Second

// settlingsUnderWay bounds the settlings a project's commands leave
// under way: past it, the next command waits for them, so a database slow
// to settle cannot pile them up.
const settlingsUnderWay = 4

// reserve holds sandbox time for a command of project. A month the
// project's earlier commands still hold, unsettled, may refuse it; it is
// then asked again once they are settled, so the command is weighed
// against what they used, not what they held. Only then, or past
// settlingsUnderWay: a command does not wait for the settling of the one
// before it when the month has room.
func (r *Runtime) reserve(ctx context.Context, project int64) (*meter.Reservation, error) {
	if r.settles.underWay(project) >= settlingsUnderWay {
		if err := r.settles.wait(ctx, project); err != nil {
			return nil, err
		}
	}
	reserved, err := r.sb.Meter.Reserve(ctx, project, r.sb.Instance)
	if errors.Is(err, meter.ErrCap) && r.settles.underWay(project) > 0 {
		if err := r.settles.wait(ctx, project); err != nil {
			return nil, err
		}
		reserved, err = r.sb.Meter.Reserve(ctx, project, r.sb.Instance)
	}
	return reserved, err
}

// settleAfterAnswer settles the command's reservation once it is answered,
// by what it ran from start to end, or at nothing when its sandbox never
// came to run it. The project's history waits for it, and its next
// reservation when the month refuses that (r.settles).
func (r *Runtime) settleAfterAnswer(ctx context.Context, sess editsession.Identity, reserved *meter.Reservation, ran bool, start, end time.Time) {
	settled := r.settles.begin(sess.ProjectID)
	go func() {
		defer settled()
		var err error
		if ran {
			_, err = r.sb.Meter.Settle(ctx, reserved, start, end)
		} else {
			err = r.sb.Meter.Unreserve(ctx, reserved)
		}
		if err != nil {
			r.log.Error("sandbox time not settled", "session", sess.ID, "err", err)
		}
	}()
}

// CancelCommands stops the commands of sess running on this instance and
// answers how many it stopped, or ErrNoRunningCommand. Each one's
// RunCommand then returns a result with Canceled set.
func (r *Runtime) CancelCommands(session Session) (int, error) {
	sess := session.Identity()
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

// commandSlots are the instance's slots for commands and who holds them.
// One person holds at most half of them, rounded up, so that one person's
// builds never leave everybody else a 429: the other half waits for the
// others. A Change's check is nobody's and takes only an instance's slot
// (checks run one at a time).
type commandSlots struct {
	mu     sync.Mutex
	max    int // 0: no bound
	share  int // the slots one person may hold
	held   int
	byUser map[int64]int
}

// nobody holds a check's slot: user ids start at 1.
const nobody int64 = 0

func newCommandSlots(max int) *commandSlots {
	return &commandSlots{max: max, share: (max + 1) / 2, byUser: map[int64]int{}}
}

// take takes a slot for user's command, or refuses at once: with
// ErrSandboxBusyPerson when user holds their share (their own commands
// must end first, whatever the others do), else with ErrSandboxBusy when
// the instance has none free. A command is never queued behind other
// people's commands.
func (s *commandSlots) take(user int64) (release func(), err error) {
	if s.max <= 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if user != nobody && s.byUser[user] >= s.share {
		return nil, fault.Detailf(ErrSandboxBusyPerson, " (%d of its %d); the others are kept for everybody else, so try again when one of yours ends",
			s.share, s.max)
	}
	if s.held >= s.max {
		return nil, ErrSandboxBusy
	}
	s.held++
	if user != nobody {
		s.byUser[user]++
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.held--
		if user != nobody {
			if s.byUser[user]--; s.byUser[user] == 0 {
				delete(s.byUser, user)
			}
		}
	}, nil
}

// runInCheckout runs the command in the session's checkout and captures
// what it changed, timing each on clock into stages.
func (r *Runtime) runInCheckout(ctx context.Context, sess editsession.Identity, uid uint32, command, folder string, live io.Writer,
	stages *CommandStages, clock *stopwatch) (*CommandResult, error) {
	// A cancel while the checkout is built stops the command as it starts
	// (its answer: cancelled), not the build halfway.
	co, err := r.checkoutFor(context.WithoutCancel(ctx), sess, uid)
	if err != nil {
		return nil, &sandboxNotRun{err}
	}
	stages.Checkout = clock.lap()
	result, err := r.sb.Provider.Run(ctx, co.ref, sandbox.Command{Argv: sandbox.CommandArgv(command), Folder: folder, Output: live,
		Limits: sandbox.Limits{Timeout: CommandTimeout, MaxStream: CommandTail, Tail: true, TimeoutExit: 124}})
	stages.Ran = clock.lap()
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
		// The session another instance took over meanwhile ends what
		// this one left running in a sandbox both reach (a pod): that,
		// not the command's end, is the answer.
		if herr := r.holdRuntime(context.WithoutCancel(ctx), sess.ID, co); errors.Is(herr, models.ErrRuntimeElsewhere) {
			return nil, herr
		}
		return nil, err
	}
	report, err := r.capture(ctx, sess, co)
	if err != nil {
		return nil, err
	}
	stages.Captured = clock.lap()
	notes := report.notes()
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

// sandboxNotRun is a command's failure before its sandbox came to run it
// (its checkout could not be made), which the meter does not charge.
type sandboxNotRun struct{ err error }

func (e *sandboxNotRun) Error() string { return e.err.Error() }
func (e *sandboxNotRun) Unwrap() error { return e.err }

// historyLength is how many past commands the page lists.
const historyLength = 20

// History returns the session's latest commands and the project's sandbox
// time this month, with what this instance's commands answered already
// still had to write.
func (r *Runtime) History(ctx context.Context, session Session) ([]models.SessionCommand, meter.Usage, error) {
	sess := session.Identity()
	if err := r.audits.wait(ctx, sess.ID); err != nil {
		return nil, meter.Usage{}, err
	}
	cmds, err := r.db.SessionCommands(ctx, sess.ID, historyLength)
	if err != nil {
		return cmds, meter.Usage{}, err
	}
	if err := r.settles.wait(ctx, sess.ProjectID); err != nil {
		return cmds, meter.Usage{}, err
	}
	usage, err := r.sb.Meter.Usage(ctx, sess.ProjectID)
	return cmds, usage, err
}
