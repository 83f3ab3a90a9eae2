// Package workbench is what runs for edit sessions: each session's
// checkout, the commands run in it and the capture of what they changed
// into edits (Runtime), the session's interactive shells with their leases
// and sandbox time (Shells), and the sandboxed run of a Change's check.
// Where the code runs is a sandbox.Provider's business: the workbench
// keeps the rules (slots, meter, audit, what becomes an edit) and reaches
// checkouts only through it.
//
// It knows a session only through editsession's Identity and the Edits it
// reads and records through; editsession knows nothing of sandboxes or
// terminals, and sees Runtime and Shells only as the Cleaners it runs when
// a session ends.
package workbench

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"atelier/editsession"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/meter"
	"atelier/models"
	"atelier/sandbox"
	"atelier/terminal"
)

// Session is an edit session as the workbench knows it: which session,
// whose, its project and its base (*editsession.Session is one).
type Session interface {
	Identity() editsession.Identity
}

// Edits is the session store as the workbench uses it: a session's edits
// to read into its checkout, and what its commands and shells changed to
// record as edits, under the session's own rules (*editsession.Edits is
// one).
type Edits interface {
	// LoadOpen is an open session for the server's own work, or
	// editsession.ErrNotFound or *editsession.GoneError.
	LoadOpen(ctx context.Context, id string) (editsession.Identity, error)
	EditVersions(ctx context.Context, sessionID string) ([]models.SessionFileVersion, error)
	// Edit is models.ErrNotFound for an unchanged path.
	Edit(ctx context.Context, sessionID, path string) (*models.SessionFile, error)
	BaseFile(ctx context.Context, sess editsession.Identity, path string) ([]byte, bool, error)
	RecordCaptured(ctx context.Context, sess editsession.Identity, edits []editsession.Captured) (refused map[string]bool, err error)
	Touch(ctx context.Context, sessionID string, at time.Time) error
}

// ErrNoSandbox is a session opened before sessions had a uid of their own.
var ErrNoSandbox = fault.New(fault.Conflict, "no_sandbox", "workbench: this session has no sandbox user; discard it and open a new one", "This session has no sandbox user; discard it and open a new one.")

// ErrStopping: the server is stopping, and builds no checkout any more.
var ErrStopping = fault.New(fault.Unavailable, "server_stopping", "workbench: the server is stopping",
	"The server is stopping; try again once it is back.")

// Sandboxes is what a session's runtime needs: where its code runs, the
// meter of sandbox time and the block of uids.
type Sandboxes struct {
	Provider sandbox.Provider
	Meter    *meter.Meter
	UIDBase  uint32
	UIDCount uint32 // sessions' uids are UIDBase + [0, UIDCount)
	Instance string // this server process, for the meter's reservations
	// MaxRunning bounds the commands this instance runs (or holds waiting
	// for their session's earlier command) at once; 0 means no bound. One
	// person holds at most half of them, rounded up.
	MaxRunning int
	// CaptureBudget is how long a capture looks at a checkout (see
	// capture); 0 is DefaultCaptureBudget.
	CaptureBudget time.Duration
	// Observer is told of every command that ran to its end; nil: nobody.
	Observer CommandObserver
	// Hint tells open admin dashboards what changed (events.Recorder.Hint);
	// nil tells nobody.
	Hint func(topic string)
}

// CommandObserver hears of commands as they end, so monitoring can count
// them without this package knowing how it does.
type CommandObserver interface {
	// CommandRan is called once per command that ran to its end (a
	// timeout included), with its exit code, how long it ran and where
	// its request's time went, once its audit row is written (after its
	// answer).
	CommandRan(exitCode int, took time.Duration, stages CommandStages)
}

// CommandStages is where a one-shot command's time went on this instance,
// stage by stage, from RunCommand's start to its audit row (written after
// the answer): what an operator reads when commands feel slow, and what
// the bench attributes a command's time by.
type CommandStages struct {
	Queued   time.Duration // its slot, and the session's lock: its earlier command, or its preparation ahead (Warm)
	Reserved time.Duration // the project's earlier settlings, and its own reservation of sandbox time
	Checkout time.Duration // the session's checkout found or built, and brought up to its edits
	Ran      time.Duration // the sandbox's run, from its start to every process gone
	Captured time.Duration // what it changed, read into edits
	Recorded time.Duration // its audit row, written after the answer
}

// stopwatch times stages one after another on the monotonic clock (r.now
// may be a test's fake, set for the meter).
type stopwatch struct{ last time.Time }

func startStopwatch() stopwatch { return stopwatch{last: time.Now()} }

// lap is the time since the last lap, or since the start.
func (w *stopwatch) lap() time.Duration {
	now := time.Now()
	d := now.Sub(w.last)
	w.last = now
	return d
}

// Runtime is what runs for the sessions this instance holds: each
// session's checkout (its provider's), the commands run in it, and the
// capture of what they changed into edits.
type Runtime struct {
	db        *models.Store
	git       *gitsvc.Service
	edits     Edits
	sb        Sandboxes
	terms     *terminal.Manager // whether a session's shells still run
	now       func() time.Time
	log       *slog.Logger
	checkouts *checkouts
	listings  *listings     // the base listings checkouts share, by commit
	slots     *commandSlots // of the commands that run or wait for their session's earlier one
	admitted  atomic.Int64  // commands running or waiting for their session's earlier one
	commands  runningCommands
	// checkMu serialises checks on this instance: they share one sandbox
	// user, the last of the block, which sessions never draw.
	checkMu sync.Mutex
	// building is held for reading while a checkout is prepared or synced,
	// and for writing by Close, which sets closed: once Close has it, every
	// checkout of this instance is in checkouts.live, and none is prepared
	// after.
	building sync.RWMutex
	closed   bool
	// warming holds a token per session being prepared ahead (Warm), and
	// warms counts them for Close.
	warming chan struct{}
	warms   sync.WaitGroup
	// settles are the meter's settlings of answered commands, by
	// project; audits their audit rows, by session.
	settles afterAnswer[int64]
	audits  afterAnswer[string]
}

// RuntimeOptions are what a Runtime works with.
type RuntimeOptions struct {
	DB        *models.Store // the commands' audit; the sessions and projects to clean up after
	Git       *gitsvc.Service
	Edits     Edits
	Sandboxes Sandboxes
	Terminals *terminal.Manager
	Now       func() time.Time
	Log       *slog.Logger
}

// NewRuntime returns the runtime of the sessions this instance holds.
func NewRuntime(o RuntimeOptions) *Runtime {
	return &Runtime{db: o.DB, git: o.Git, edits: o.Edits, sb: o.Sandboxes, terms: o.Terminals,
		now: o.Now, log: o.Log, checkouts: newCheckouts(), listings: newListings(), slots: newCommandSlots(o.Sandboxes.MaxRunning),
		warming: make(chan struct{}, warmAtOnce)}
}

// warmAtOnce is how many sessions an instance prepares ahead at once, and
// warmTimeout how long it gives one.
const (
	warmAtOnce  = 2
	warmTimeout = 2 * time.Minute
)

// Warm prepares, in the background, the checkout of a session whose
// person has just opened it, and what its first command starts with, so
// that the command runs without waiting for either. A warm-up gives way:
// when a command or shell of the session builds the checkout already, or
// this instance prepares warmAtOnce sessions already, it does nothing, and
// the first command builds what it needs as it would without it.
func (r *Runtime) Warm(session Session) {
	sess := session.Identity()
	if sess.Editable() != nil {
		return
	}
	uid, err := r.sandboxUser(sess)
	if err != nil {
		return
	}
	r.building.RLock()
	closed := r.closed
	if !closed {
		r.warms.Add(1)
	}
	r.building.RUnlock()
	if closed {
		return
	}
	select {
	case r.warming <- struct{}{}:
	default:
		r.warms.Done()
		return
	}
	go func() {
		defer r.warms.Done()
		defer func() { <-r.warming }()
		unlock, ok := r.checkouts.tryLock(sess.ID)
		if !ok {
			return
		}
		defer unlock()
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		co, err := r.checkoutFor(ctx, sess, uid)
		if err != nil {
			r.log.Info("session not prepared ahead", "session", sess.ID, "err", err)
			return
		}
		co.lastUsed = r.now()
		r.sb.Provider.Anticipate(co.ref)
		// The first command's capture compares with the base's listing,
		// which costs a git process: read it now too.
		if _, err := r.baseEntries(ctx, sess, co); err != nil {
			r.log.Info("session's base not listed ahead", "session", sess.ID, "err", err)
		}
	}()
}

// uid is the session's sandbox user, the one place it is derived.
func (r *Runtime) uid(slot *int32) (uint32, error) {
	if slot == nil {
		return 0, ErrNoSandbox
	}
	return r.sb.UIDBase + uint32(*slot), nil
}

// sandboxUser is the uid the session's processes run as, once the
// provider can run them: a command or shell refused for that is refused
// before it takes a slot, a reservation or a checkout.
func (r *Runtime) sandboxUser(sess editsession.Identity) (uint32, error) {
	if err := r.sb.Provider.Available(); err != nil {
		return 0, err
	}
	return r.uid(sess.SandboxSlot)
}

// ref names the session, as uid, to the provider.
func (r *Runtime) ref(sess editsession.Identity, uid uint32) sandbox.Session {
	return sandbox.Session{ID: sess.ID, ProjectID: sess.ProjectID, UID: uid,
		Network: sandbox.Network(sess.Project.SandboxNetwork), Cache: true}
}

// prepareShell prepares the session's checkout, as uid, for a shell (built
// or brought up to date first), and answers how to start the shell in it.
func (r *Runtime) prepareShell(ctx context.Context, sess editsession.Identity, uid uint32) (*consoleLauncher, error) {
	unlock := r.checkouts.lock(sess.ID)
	defer unlock()
	co, err := r.checkoutFor(ctx, sess, uid)
	if err != nil {
		return nil, err
	}
	co.lastUsed = r.now()
	r.checkouts.mu.Lock()
	r.checkouts.starting[sess.ID]++
	r.checkouts.mu.Unlock()
	started := sync.OnceFunc(func() {
		r.checkouts.mu.Lock()
		defer r.checkouts.mu.Unlock()
		if r.checkouts.starting[sess.ID]--; r.checkouts.starting[sess.ID] <= 0 {
			delete(r.checkouts.starting, sess.ID)
		}
	})
	return &consoleLauncher{ctx: ctx, provider: r.sb.Provider, ref: co.ref, started: started}, nil
}

// checkoutFor returns the session's checkout, built by the provider from
// the fork when it has none, and brought up to date with the edits. The
// caller holds the session's checkout lock.
func (r *Runtime) checkoutFor(ctx context.Context, sess editsession.Identity, uid uint32) (*checkout, error) {
	r.building.RLock()
	defer r.building.RUnlock()
	if r.closed {
		return nil, ErrStopping
	}
	// One instance runs a session's code at a time: the one that holds its
	// runtime in the database.
	if err := r.db.ClaimSessionRuntime(ctx, sess.ID, r.sb.Instance); err != nil {
		return nil, err
	}
	ref := r.ref(sess, uid)
	prepared, err := r.sb.Provider.Prepare(ctx, ref, gitBase{git: r.git, repo: sess.Source.Repo, commit: sess.Source.Commit})
	if err != nil {
		return nil, err
	}
	r.checkouts.mu.Lock()
	co := r.checkouts.live[sess.ID]
	if co == nil || prepared.Fresh {
		co = &checkout{layered: prepared.Layered, synced: map[string]string{}}
		r.checkouts.live[sess.ID] = co
	}
	co.ref = ref
	r.checkouts.mu.Unlock()
	return co, r.sync(ctx, sess, co)
}

// HolderElsewhere answers the address of the live instance, other than
// this one, that holds the session's runtime; "" when none does (this
// instance may take it) or when that instance takes no requests.
func (r *Runtime) HolderElsewhere(ctx context.Context, session Session) (string, error) {
	return r.HolderOf(ctx, session.Identity().ID)
}

// HolderOf is HolderElsewhere for a session known by its id alone, as a
// person who watches one of its shells knows it.
func (r *Runtime) HolderOf(ctx context.Context, sessionID string) (string, error) {
	_, address, err := r.db.SessionHolder(ctx, sessionID, r.sb.Instance)
	return address, err
}

// inSessionTag is a terminal's tag that names the session it works in; the
// checkout stays while one runs.
type inSessionTag interface{ session() string }

// hasShells reports whether a terminal of the session still runs here,
// or one is starting.
func (r *Runtime) hasShells(sessionID string) bool {
	r.checkouts.mu.Lock()
	starting := r.checkouts.starting[sessionID] > 0
	r.checkouts.mu.Unlock()
	if starting {
		return true
	}
	for _, t := range r.terms.Running() {
		if tag, ok := t.Tag().(inSessionTag); ok && tag.session() == sessionID {
			return true
		}
	}
	return false
}

// captureAfterShells turns what the session's shells changed into edits
// once the last of them has ended, as after a command: nothing of the
// session may run while its files are read, so it waits for that moment.
func (r *Runtime) captureAfterShells(ctx context.Context, sessionID string) error {
	unlock := r.checkouts.lock(sessionID)
	defer unlock()
	if r.hasShells(sessionID) {
		return nil
	}
	return r.captureIn(ctx, sessionID, func(co *checkout) error { return r.sb.Provider.KillAll(ctx, co.ref) })
}

// DropIdleCheckouts removes checkouts unused for two minutes that no shell
// works in; the next command rebuilds them from the fork and the edits.
// Run calls it.
func (r *Runtime) DropIdleCheckouts(ctx context.Context) {
	now := r.now()
	r.checkouts.mu.Lock()
	var idle []string
	for id, co := range r.checkouts.live {
		if now.Sub(co.lastUsed) >= checkoutIdle {
			idle = append(idle, id)
		}
	}
	r.checkouts.mu.Unlock()
	for _, id := range idle {
		unlock := r.checkouts.lock(id)
		busy := r.hasShells(id)
		r.checkouts.mu.Lock()
		co := r.checkouts.live[id]
		if co != nil && !busy && r.now().Sub(co.lastUsed) >= checkoutIdle {
			delete(r.checkouts.live, id)
		} else {
			co = nil
		}
		r.checkouts.mu.Unlock()
		if co != nil {
			if err := r.sb.Provider.Release(ctx, co.ref); err != nil {
				r.log.Warn("idle checkout not removed", "session", id, "err", err)
			}
			// Nothing of it runs here any more: any instance may take it.
			if err := r.db.ReleaseSessionRuntime(ctx, id, r.sb.Instance); err != nil {
				r.log.Warn("idle session not let go", "session", id, "err", err)
			}
		}
		unlock()
	}
}

// EndSession ends the session's sandbox when the session ends: every
// process of its user, then its checkout, home and disk. Sessions call it.
func (r *Runtime) EndSession(ctx context.Context, cs *models.CodeSession) error {
	uid, err := r.uid(cs.SandboxSlot)
	if errors.Is(err, ErrNoSandbox) {
		return nil
	}
	unlock := r.checkouts.lock(cs.ID)
	defer unlock()
	r.checkouts.mu.Lock()
	delete(r.checkouts.live, cs.ID)
	r.checkouts.mu.Unlock()
	return r.sb.Provider.End(ctx, sandbox.Session{ID: cs.ID, ProjectID: cs.ProjectID, UID: uid})
}

// EndProject removes what the provider keeps for a deleted project.
func (r *Runtime) EndProject(ctx context.Context, p *models.Project) error {
	return r.sb.Provider.EndProject(ctx, p.ID)
}

// KillLeftovers has the provider end what earlier instances of this
// place (gone, see instances.Instance.Start) left of the sessions still
// open, such as a command that outlived a crashed server: the sessions
// they held, and those nobody holds. Sessions a live instance holds, on
// this host or another, are left alone. The next command of each builds
// its checkout afresh.
func (r *Runtime) KillLeftovers(ctx context.Context, gone []string) error {
	css, err := r.db.SessionsLeftBy(ctx, gone)
	if err != nil {
		return err
	}
	var open []sandbox.Session
	for i := range css {
		if uid, err := r.uid(css[i].SandboxSlot); err == nil {
			open = append(open, sandbox.Session{ID: css[i].ID, ProjectID: css[i].ProjectID, UID: uid})
		}
	}
	return r.sb.Provider.Recover(ctx, open)
}

// Close takes down what runs for sessions of this instance, for a server
// that stops once it serves no request any more and its shells have ended
// (their changes captured). The sessions stay open in the database with
// their edits; the next command of each builds its checkout afresh. A
// command that comes after gets ErrStopping.
func (r *Runtime) Close(ctx context.Context) error {
	r.building.Lock()
	r.closed = true
	r.building.Unlock()
	r.warms.Wait() // each finds the runtime closed, or is done
	live, errs := r.killAll(ctx)
	for id := range live {
		unlock := r.checkouts.lock(id)
		defer unlock()
	}
	r.checkouts.mu.Lock()
	clear(r.checkouts.live)
	r.checkouts.mu.Unlock()
	// Every command has returned (its session's lock, above, or the
	// server's requests before Close), so every settling and audit row
	// has begun.
	errs = append(errs, r.settles.waitAll(ctx), r.audits.waitAll(ctx))
	errs = append(errs, r.sb.Provider.Close(ctx))
	return errors.Join(errs...)
}

// killAll kills every process of every checkout here and answers the
// checkouts. It goes before the sessions' locks are taken: a command that
// still runs holds its session's lock until it ends, and ends once its
// processes are gone.
func (r *Runtime) killAll(ctx context.Context) (map[string]*checkout, []error) {
	r.checkouts.mu.Lock()
	live := maps.Clone(r.checkouts.live)
	r.checkouts.mu.Unlock()
	var errs []error
	for _, co := range live {
		errs = append(errs, r.sb.Provider.KillAll(ctx, co.ref))
	}
	return live, errs
}

// Abandon ends everything this instance runs for sessions and drops their
// checkouts, for an instance that was declared gone and lives on: its
// claims were released and its reservations settled meanwhile, so another
// instance may run those sessions now. A command that was running ends
// as stopped, and captures only if its session is still free to claim.
func (r *Runtime) Abandon(ctx context.Context) error {
	var live map[string]*checkout
	var errs []error
	if _, shared := r.sb.Provider.(sandbox.SharedByInstances); shared {
		// The instance that holds the sessions now runs in the same
		// sandboxes: only this one's commands end.
		live = r.cancelAllCommands()
	} else {
		live, errs = r.killAll(ctx)
	}
	for id, co := range live {
		unlock := r.checkouts.lock(id)
		errs = append(errs, r.forget(ctx, id, co))
		unlock()
	}
	return errors.Join(errs...)
}

// forget drops co, the session's checkout here, and what the provider
// keeps for it on this host; a checkout built since is left alone. The
// session's edits and its runtime elsewhere are untouched.
func (r *Runtime) forget(ctx context.Context, sessionID string, co *checkout) error {
	r.checkouts.mu.Lock()
	mine := r.checkouts.live[sessionID] == co
	if mine {
		delete(r.checkouts.live, sessionID)
	}
	r.checkouts.mu.Unlock()
	if !mine {
		return nil
	}
	return r.sb.Provider.Leave(ctx, co.ref)
}

// cancelAllCommands cancels every command this instance runs, as their
// sandboxes' runners stop them at a timeout, and answers the checkouts.
func (r *Runtime) cancelAllCommands() map[string]*checkout {
	r.commands.mu.Lock()
	for c := range r.commands.all {
		if c.cancel != nil {
			c.cancel(errAbandoned)
		}
	}
	r.commands.mu.Unlock()
	r.checkouts.mu.Lock()
	defer r.checkouts.mu.Unlock()
	return maps.Clone(r.checkouts.live)
}

// HeldSessions answers the sessions with a checkout on this instance:
// every session whose commands or shells run here.
func (r *Runtime) HeldSessions() []string {
	r.checkouts.mu.Lock()
	defer r.checkouts.mu.Unlock()
	return slices.Collect(maps.Keys(r.checkouts.live))
}

// CaptureShells turns what running shells changed into edits, for each
// session with a shell on this instance whose checkout no command holds
// at the moment (a command's own capture follows it). A shell's files
// outlive this process only as edits: an instance that dies loses what
// its shells wrote since the last capture, never more than Run's tick.
// Run calls it.
func (r *Runtime) CaptureShells(ctx context.Context) {
	for _, id := range r.HeldSessions() {
		if !r.hasShells(id) {
			continue
		}
		unlock, ok := r.checkouts.tryLock(id)
		if !ok {
			continue
		}
		if err := r.captureIn(ctx, id, nil); err != nil {
			r.log.Warn("changes made in a shell not captured", "session", id, "err", err)
		}
		unlock()
	}
}

// captureIn captures the session's checkout, if it has one here and is
// still open, after first (nil: nothing first); the caller holds the
// session's checkout lock.
func (r *Runtime) captureIn(ctx context.Context, sessionID string, first func(*checkout) error) error {
	r.checkouts.mu.Lock()
	co := r.checkouts.live[sessionID]
	r.checkouts.mu.Unlock()
	if co == nil {
		return nil
	}
	sess, err := r.edits.LoadOpen(ctx, sessionID)
	if errors.Is(err, editsession.ErrNotFound) || errors.As(err, new(*editsession.GoneError)) {
		return nil // ended meanwhile: its edits are gone anyway
	}
	if err != nil {
		return err
	}
	if first != nil {
		// Only the session's holder ends what runs in its sandbox: in one
		// that every instance reaches (a pod), another instance's
		// commands may run by now.
		if err := r.holdRuntime(ctx, sessionID, co); err != nil {
			return err
		}
		if err := first(co); err != nil {
			return err
		}
	}
	_, err = r.capture(ctx, sess, co)
	return err
}

// Run drops idle checkouts and captures what running shells changed,
// every checkoutIdle/4, until ctx ends.
func (r *Runtime) Run(ctx context.Context) {
	t := time.NewTicker(checkoutIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.DropIdleCheckouts(ctx)
			r.CaptureShells(ctx)
		}
	}
}
