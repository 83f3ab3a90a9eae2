package workbench

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"atelier/auth"
	"atelier/events"
	"atelier/meter"
	"atelier/models"
	"atelier/sandbox"
	"atelier/terminal"
)

// LeaseEvery is how often this instance renews the leases of its shells
// and re-checks that their owners may still use them.
const LeaseEvery = 5 * time.Second

// staleLease is how old a lease's heartbeat may grow before nobody is
// taken to run its shell any more.
const staleLease = 3 * LeaseEvery

// shell is what a session's shell records about itself, as its terminal's
// tag: terminal.Manager is the one registry of terminals, and this is how a
// session finds its own among them.
type shell struct {
	sessionID string
	projectID int64
	userID    int64
	res       *meter.Reservation
	started   time.Time
	// active is when the owner last used the shell (unix ns), for the
	// heartbeat to write as the session's activity.
	active atomic.Int64
}

func (sh *shell) session() string { return sh.sessionID }

// Shells are the interactive shells of sessions on this instance: opening
// them in the session's checkout, their leases, and the renewal of their
// sandbox time.
type Shells struct {
	db       *models.Store
	rt       *Runtime
	edits    Edits
	terms    *terminal.Manager
	meter    *meter.Meter
	instance string
	hint     func(topic string)
	now      func() time.Time
	log      *slog.Logger

	// watching counts the shells whose end is not yet settled (watch).
	watching sync.WaitGroup
	// viewers are the people watching shells here through shares.
	viewers viewers
}

// ShellsOptions are what Shells work with.
type ShellsOptions struct {
	DB        *models.Store // the shells' leases
	Runtime   *Runtime      // the checkouts the shells run in
	Edits     Edits         // the sessions the shells' use keeps active
	Terminals *terminal.Manager
	Meter     *meter.Meter
	Instance  string // this server process, for the leases and the meter
	// Hint tells open admin dashboards what changed; nil tells nobody.
	Hint func(topic string)
	Now  func() time.Time
	Log  *slog.Logger
}

// NewShells returns the shells of sessions.
func NewShells(o ShellsOptions) *Shells {
	return &Shells{db: o.DB, rt: o.Runtime, edits: o.Edits, terms: o.Terminals, meter: o.Meter,
		instance: o.Instance, hint: o.Hint, now: o.Now, log: o.Log}
}

// ReserveShell takes one of the account's and the instance's shell slots
// on this instance; the handler calls it before it reads the request or
// prepares anything. OpenShell holds the account to its bound on all
// instances together.
func (s *Shells) ReserveShell(user *models.User) (*terminal.Slot, error) {
	return s.terms.Reserve(strconv.FormatInt(user.ID, 10))
}

// OpenShell starts an interactive bash (sandbox.ShellArgv) in the
// session's checkout as the session's user, in the slot reserved for it,
// and leases it. It reserves sandbox time first: a live shell is awake
// time. The lease is claimed before the shell starts, and only while the
// account holds fewer live leases than its bound on every instance
// together (ErrAccountShells). Any failure releases the slot.
func (s *Shells) OpenShell(ctx context.Context, session Session, slot *terminal.Slot, cols, rows int) (*terminal.Terminal, error) {
	sess := session.Identity()
	if err := sess.Editable(); err != nil {
		slot.Release()
		return nil, err
	}
	uid, err := s.rt.sandboxUser(sess)
	if err != nil {
		slot.Release()
		return nil, err
	}
	res, err := s.meter.Reserve(ctx, sess.ProjectID, s.instance)
	if err != nil {
		slot.Release()
		return nil, err
	}
	settle := func(start time.Time) {
		if _, err := s.meter.Settle(context.WithoutCancel(ctx), res, start, s.now()); err != nil {
			s.log.Error("shell time not settled", "session", sess.ID, "err", err)
		}
	}
	start := s.now()
	launch, err := s.rt.prepareShell(ctx, sess, uid)
	if err != nil {
		s.log.Warn("no checkout for a shell", "session", sess.ID, "err", err)
		slot.Release()
		// Nothing of the sandbox ran for it.
		if err := s.meter.Unreserve(ctx, res); err != nil {
			s.log.Error("shell time not settled", "session", sess.ID, "err", err)
		}
		return nil, err
	}
	// Starting until it is a terminal (OpenWith registers it) or has failed.
	defer launch.started()
	now := s.now()
	lease := &models.Terminal{ID: slot.ID(), SessionID: sess.ID, UserID: sess.UserID, Instance: s.instance,
		State: models.TerminalLive, OpenedAt: now, HeartbeatAt: now}
	claimed, err := s.db.ClaimTerminal(ctx, lease, s.terms.Config().AccountShells, now.Add(-staleLease))
	if err == nil && !claimed {
		err = terminal.ErrAccountShells
	}
	if err != nil {
		slot.Release()
		settle(start)
		return nil, err
	}
	sh := &shell{sessionID: sess.ID, projectID: sess.ProjectID, userID: sess.UserID, res: res, started: start}
	t, err := s.terms.OpenWith(slot, launch, terminal.Options{Cols: cols, Rows: rows, Kill: launch.kill, Tag: sh})
	if err != nil {
		s.log.Warn("shell not started", "session", sess.ID, "err", err)
		if err := s.db.EndTerminal(context.WithoutCancel(ctx), lease.ID, models.TerminalClosed, s.now()); err != nil {
			s.log.Warn("terminal lease not ended", "terminal", lease.ID, "err", err)
		}
		settle(start)
		return nil, err
	}
	s.watching.Go(func() { s.watch(t, sh) })
	s.tell(events.TopicTerminals)
	return t, nil
}

// tell tells open dashboards that topic changed.
func (s *Shells) tell(topic string) {
	if s.hint != nil {
		s.hint(topic)
	}
}

// Wait returns once the end of every shell that has ended is settled:
// its time, its lease and the capture of what it changed. A server that
// stops closes its terminals, then waits here before it closes the
// database.
func (s *Shells) Wait() { s.watching.Wait() }

// watch settles the shell's sandbox time and ends its lease once the shell
// has ended, however it ended, then captures what the session's shells
// changed if it was the last.
func (s *Shells) watch(t *terminal.Terminal, sh *shell) {
	<-t.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.meter.Settle(ctx, sh.res, sh.started, s.now()); err != nil && !errors.Is(err, meter.ErrSettled) {
		s.log.Error("shell time not settled", "terminal", t.ID(), "err", err)
	}
	if err := s.db.EndTerminal(ctx, t.ID(), models.TerminalClosed, s.now()); err != nil {
		s.log.Warn("terminal lease not ended", "terminal", t.ID(), "err", err)
	}
	s.tell(events.TopicTerminals)
	if err := s.rt.captureAfterShells(ctx, sh.sessionID); err != nil {
		s.log.Warn("changes made in a shell not captured", "session", sh.sessionID, "err", err)
	}
}

// running are the shells that still run on this instance, with their tags.
func (s *Shells) running() ([]*terminal.Terminal, []*shell) {
	var ts []*terminal.Terminal
	var shs []*shell
	for _, t := range s.terms.Running() {
		if sh, ok := t.Tag().(*shell); ok {
			ts = append(ts, t)
			shs = append(shs, sh)
		}
	}
	return ts, shs
}

// Shell returns a running shell of the session, or terminal.ErrNotFound
// for a shell that is not the session's or no longer runs.
func (s *Shells) Shell(session Session, id string) (*terminal.Terminal, error) {
	sess := session.Identity()
	t, err := s.terms.Get(id)
	if err != nil {
		return nil, terminal.ErrNotFound
	}
	sh, ok := t.Tag().(*shell)
	if !ok || sh.sessionID != sess.ID || ended(t) {
		return nil, terminal.ErrNotFound
	}
	return t, nil
}

func ended(t *terminal.Terminal) bool {
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}

// Shells lists the session's running shells, oldest first.
func (s *Shells) Shells(session Session) []*terminal.Terminal {
	sess := session.Identity()
	ts, shs := s.running()
	var mine []*terminal.Terminal
	for i, t := range ts {
		if shs[i].sessionID == sess.ID {
			mine = append(mine, t)
		}
	}
	return mine
}

// Owned returns the running shell id when it is one of user's session
// sessionID on projectID, from memory alone, and notes a use at active
// (unless it is zero) as the session's activity; ok is false otherwise, and
// the caller then checks the request in full. Whether user may still edit
// the project is the caller's to check. The heartbeat writes the activity
// and closes the shell once its owner may no longer edit.
func (s *Shells) Owned(user *models.User, projectID int64, sessionID, id string, active time.Time) (*terminal.Terminal, bool) {
	if user == nil {
		return nil, false
	}
	t, err := s.terms.Get(id)
	if err != nil {
		return nil, false
	}
	sh, ok := t.Tag().(*shell)
	if !ok || sh.sessionID != sessionID || sh.userID != user.ID || sh.projectID != projectID || ended(t) {
		return nil, false
	}
	if !active.IsZero() {
		sh.active.Store(active.UnixNano())
	}
	return t, true
}

// EndSession closes the session's shells when the session ends; Sessions
// call it.
func (s *Shells) EndSession(_ context.Context, cs *models.CodeSession) error {
	ts, shs := s.running()
	for i, t := range ts {
		if shs[i].sessionID == cs.ID {
			t.Close()
		}
	}
	return nil
}

// Abandon closes every shell of this instance and has the runtime abandon
// what it runs (Runtime.Abandon): for an instance declared gone that
// lives on (instances.Options.Revived).
func (s *Shells) Abandon(ctx context.Context) {
	ts, _ := s.running()
	for _, t := range ts {
		t.Close()
	}
	if err := s.rt.Abandon(ctx); err != nil {
		s.log.Warn("what ran for sessions here not all ended", "err", err)
	}
}

// EndedShell reports whether id was a shell of the session that no longer
// runs here, such as one of a previous server process: its viewers are
// told it exited rather than that it never existed.
func (s *Shells) EndedShell(ctx context.Context, session Session, id string) bool {
	sess := session.Identity()
	lease, err := s.db.TerminalByID(ctx, id)
	return err == nil && lease.SessionID == sess.ID
}

// Heartbeat renews this instance's leases and closes each shell whose
// lease was ended elsewhere, whose owner may no longer edit, or whose
// project ran out of sandbox time. Run beats every LeaseEvery.
func (s *Shells) Heartbeat(ctx context.Context) {
	ts, shs := s.running()
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID()
	}
	now := s.now()
	lost, err := s.db.HeartbeatTerminals(ctx, s.instance, ids, now)
	if err != nil {
		s.log.Warn("terminal leases not renewed", "err", err)
		return
	}
	s.recordActivity(ctx, shs)
	for i, t := range ts {
		sh := shs[i]
		switch {
		case lost[t.ID()]:
			s.log.Info("terminal lease lost; closing its shell", "terminal", t.ID())
		case !s.mayStillEdit(ctx, sh):
			s.log.Info("terminal owner may no longer edit; closing the shell", "terminal", t.ID())
		default:
			if err := s.meter.Renew(ctx, sh.res); err == nil {
				continue
			} else if !errors.Is(err, meter.ErrCap) {
				s.log.Warn("shell reservation not renewed", "terminal", t.ID(), "err", err)
				continue
			}
			s.log.Info("sandbox time used up; closing the shell", "terminal", t.ID())
		}
		t.Close()
	}
	if _, err := s.db.LoseStaleTerminals(ctx, now.Add(-staleLease), now); err != nil {
		s.log.Warn("stale terminal leases not marked lost", "err", err)
	}
	s.checkViewers(ctx)
}

// recordActivity writes, once per session, the latest use of its shells
// since the last beat as the session's activity: at most one write per
// session every LeaseEvery, however fast the keys come.
func (s *Shells) recordActivity(ctx context.Context, shs []*shell) {
	latest := map[string]int64{}
	for _, sh := range shs {
		if at := sh.active.Swap(0); at > latest[sh.sessionID] {
			latest[sh.sessionID] = at
		}
	}
	for id, at := range latest {
		if at == 0 {
			continue
		}
		if err := s.edits.Touch(ctx, id, time.Unix(0, at)); err != nil {
			s.log.Warn("shell activity not recorded", "session", id, "err", err)
		}
	}
}

// mayStillEdit re-checks, from the database, that the shell's owner still
// holds code.edit on the project, the project is active and the session
// is still open.
func (s *Shells) mayStillEdit(ctx context.Context, sh *shell) bool {
	// A database hiccup is no verdict: only a definite answer closes.
	cs, err := s.db.SessionByID(ctx, sh.sessionID)
	switch {
	case errors.Is(err, models.ErrNotFound):
		return false
	case err != nil:
		return true
	case cs.State != models.SessionOpen:
		return false
	}
	p, role, err := s.db.ProjectOfMember(ctx, sh.projectID, sh.userID)
	switch {
	case errors.Is(err, models.ErrNotFound):
		return false
	case err != nil:
		return true
	}
	// An archived project's sessions are paused: their shells close, and
	// what they changed is captured as after any shell.
	return auth.Can(auth.Role(role), auth.CodeEdit) && !p.Archived()
}

// Run renews the leases every LeaseEvery until ctx ends.
func (s *Shells) Run(ctx context.Context) {
	t := time.NewTicker(LeaseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Heartbeat(ctx)
		}
	}
}

// consoleLauncher starts a session's shell through its provider, for the
// terminal to drive.
type consoleLauncher struct {
	ctx      context.Context
	provider sandbox.Provider
	ref      sandbox.Session
	console  sandbox.Console // once launched
	// started ends the shell's count among those starting
	// (checkouts.starting): once it is a terminal, or failed to be one.
	started func()
}

func (l *consoleLauncher) Launch(cols, rows int, _ terminal.Options) (terminal.Stream, terminal.Process, error) {
	c, err := l.provider.Start(l.ctx, l.ref, cols, rows)
	if err != nil {
		return nil, nil, err
	}
	l.console = c
	return c, consoleProcess{c}, nil
}

// kill ends the shell and all it started: the console knows how, wherever
// the shell runs.
func (l *consoleLauncher) kill() error {
	if l.console == nil {
		return nil
	}
	return l.console.Kill()
}

// consoleProcess is the shell of a console, as the terminal waits on it.
type consoleProcess struct{ c sandbox.Console }

// Pid is the shell's process id on this host when it runs here (the
// local provider's consoles say), else 0: the console's Kill is what ends
// it, wherever it runs.
func (p consoleProcess) Pid() int {
	if local, ok := p.c.(interface{ Pid() int }); ok {
		return local.Pid()
	}
	return 0
}

func (p consoleProcess) Wait() (terminal.Exit, error) {
	exit, err := p.c.Wait()
	return terminal.Exit{Code: exit.Code, Signal: exit.Signal}, err
}
