package editsession

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"atelier/auth"
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

// ErrShellCap closes a shell whose project ran out of sandbox time.
var ErrShellCap = errors.New("editsession: the project's sandbox time for this month is used up")

// shell is one live interactive shell of a session on this instance.
type shell struct {
	t         *terminal.Terminal
	sessionID string
	projectID int64
	userID    int64
	res       *meter.Reservation
	started   time.Time
}

// shells are this instance's live shells, by terminal id.
type shells struct {
	mu  sync.Mutex
	mgr *terminal.Manager
	all map[string]*shell
}

// SetTerminals enables interactive shells, run by mgr.
func (s *Service) SetTerminals(mgr *terminal.Manager) {
	s.terms = &shells{mgr: mgr, all: map[string]*shell{}}
}

// ReserveShell takes one of the account's and the instance's shell slots;
// the handler calls it before it reads the request or prepares anything.
func (s *Service) ReserveShell(user *models.User) (*terminal.Slot, error) {
	if s.terms == nil || s.sb == nil {
		return nil, ErrNoSandbox
	}
	return s.terms.mgr.Reserve(strconv.FormatInt(user.ID, 10))
}

// OpenShell starts `bash -l` in the session's checkout as the session's
// user, in the slot reserved for it, and leases it. It reserves sandbox
// time first: a live shell is awake time. Any failure releases the slot.
func (s *Service) OpenShell(ctx context.Context, sess *Session, slot *terminal.Slot, cols, rows int) (*terminal.Terminal, error) {
	uid, err := s.identity(sess.CodeSession)
	if err != nil {
		slot.Release()
		return nil, err
	}
	res, err := s.sb.Meter.Reserve(ctx, sess.ProjectID, s.sb.Instance)
	if err != nil {
		slot.Release()
		return nil, err
	}
	settle := func(start time.Time) {
		if _, err := s.sb.Meter.Settle(context.WithoutCancel(ctx), res, start, s.now()); err != nil {
			s.log.Error("shell time not settled", "session", sess.ID, "err", err)
		}
	}
	start := s.now()
	unlock := s.checkouts.lock(sess.ID)
	co, err := s.checkoutFor(ctx, sess, uid)
	if err == nil {
		co.lastUsed = s.now()
	}
	unlock()
	if err != nil {
		s.log.Warn("no checkout for a shell", "session", sess.ID, "err", err)
		slot.Release()
		settle(start)
		return nil, err
	}
	spec := sandbox.Spec{
		UID: uid, GID: uid, Workspace: co.dir, Dir: co.dir, Home: co.home, Tmp: co.tmp,
		Argv:     []string{"/bin/bash", "-l"},
		ExtraEnv: []string{"TERM=xterm-256color"},
		Network:  sandbox.Network(sess.Project.SandboxNetwork),
	}
	t, err := s.terms.mgr.OpenWith(slot, func(tty *os.File) (terminal.Process, error) {
		spec.TTY = tty
		p, err := s.sb.Box.Start(spec)
		if err != nil {
			return nil, err
		}
		return shellProcess{p}, nil
	}, terminal.Options{Cols: cols, Rows: rows, SlaveUID: int(uid), SlaveGID: int(uid)})
	if err != nil {
		s.log.Warn("shell not started", "session", sess.ID, "err", err)
		settle(start)
		return nil, err
	}
	now := s.now()
	lease := &models.Terminal{ID: t.ID(), SessionID: sess.ID, UserID: sess.UserID, Instance: s.sb.Instance,
		State: models.TerminalLive, OpenedAt: now, HeartbeatAt: now}
	if err := s.db.CreateTerminal(ctx, lease); err != nil {
		t.Close()
		settle(start)
		return nil, err
	}
	sh := &shell{t: t, sessionID: sess.ID, projectID: sess.ProjectID, userID: sess.UserID, res: res, started: start}
	s.terms.mu.Lock()
	s.terms.all[t.ID()] = sh
	s.terms.mu.Unlock()
	go s.watchShell(sh)
	return t, nil
}

// watchShell settles the shell's sandbox time and ends its lease once the
// shell has ended, however it ended.
func (s *Service) watchShell(sh *shell) {
	<-sh.t.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.sb.Meter.Settle(ctx, sh.res, sh.started, s.now()); err != nil && !errors.Is(err, meter.ErrSettled) {
		s.log.Error("shell time not settled", "terminal", sh.t.ID(), "err", err)
	}
	if err := s.db.EndTerminal(ctx, sh.t.ID(), models.TerminalClosed, s.now()); err != nil {
		s.log.Warn("terminal lease not ended", "terminal", sh.t.ID(), "err", err)
	}
	s.terms.mu.Lock()
	delete(s.terms.all, sh.t.ID())
	s.terms.mu.Unlock()
	if err := s.captureAfterShells(ctx, sh.sessionID); err != nil {
		s.log.Warn("changes made in a shell not captured", "session", sh.sessionID, "err", err)
	}
}

// captureAfterShells turns what the session's shells changed into edits
// once the last of them has ended, as after a command: nothing of the
// session may run while its files are read, so it waits for that moment.
func (s *Service) captureAfterShells(ctx context.Context, sessionID string) error {
	unlock := s.checkouts.lock(sessionID)
	defer unlock()
	if s.hasShells(sessionID) {
		return nil
	}
	s.checkouts.mu.Lock()
	co := s.checkouts.live[sessionID]
	s.checkouts.mu.Unlock()
	if co == nil {
		return nil
	}
	sess, err := s.internal(ctx, sessionID)
	if errors.Is(err, ErrNotFound) || errors.As(err, new(*GoneError)) {
		return nil // ended meanwhile: its edits are gone anyway
	}
	if err != nil {
		return err
	}
	if err := s.sb.Box.KillAll(ctx, co.uid); err != nil {
		return err
	}
	_, err = s.capture(ctx, sess, co)
	return err
}

func (s *Service) hasShells(sessionID string) bool {
	if s.terms == nil {
		return false
	}
	s.terms.mu.Lock()
	defer s.terms.mu.Unlock()
	for _, sh := range s.terms.all {
		if sh.sessionID == sessionID {
			return true
		}
	}
	return false
}

// Shell returns a shell of the session, or terminal.ErrNotFound for a
// shell that is not the session's or no longer runs.
func (s *Service) Shell(sess *Session, id string) (*terminal.Terminal, error) {
	if s.terms == nil {
		return nil, terminal.ErrNotFound
	}
	s.terms.mu.Lock()
	sh, ok := s.terms.all[id]
	s.terms.mu.Unlock()
	if !ok || sh.sessionID != sess.ID {
		return nil, terminal.ErrNotFound
	}
	return sh.t, nil
}

// Shells lists the session's live shells, oldest first.
func (s *Service) Shells(sess *Session) []*terminal.Terminal {
	if s.terms == nil {
		return nil
	}
	s.terms.mu.Lock()
	defer s.terms.mu.Unlock()
	var ts []*terminal.Terminal
	for _, sh := range s.terms.all {
		if sh.sessionID == sess.ID {
			ts = append(ts, sh.t)
		}
	}
	sortByOpened(ts)
	return ts
}

func sortByOpened(ts []*terminal.Terminal) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Opened().Before(ts[j-1].Opened()); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// closeShells closes the shells of one session, or of every session when
// sessionID is "".
func (s *Service) closeShells(sessionID string) {
	if s.terms == nil {
		return
	}
	s.terms.mu.Lock()
	var doomed []*terminal.Terminal
	for _, sh := range s.terms.all {
		if sessionID == "" || sh.sessionID == sessionID {
			doomed = append(doomed, sh.t)
		}
	}
	s.terms.mu.Unlock()
	for _, t := range doomed {
		t.Close()
	}
}

// Heartbeat runs one beat of the leases now; Run beats every LeaseEvery.
func (s *Service) Heartbeat(ctx context.Context) { s.heartbeatShells(ctx) }

// EndedShell reports whether id was a shell of the session that no longer
// runs here, such as one of a previous server process: its viewers are
// told it exited rather than that it never existed.
func (s *Service) EndedShell(ctx context.Context, sess *Session, id string) bool {
	lease, err := s.db.TerminalByID(ctx, id)
	return err == nil && lease.SessionID == sess.ID
}

// heartbeatShells renews this instance's leases and closes each shell
// whose lease was ended elsewhere, whose owner may no longer edit, or whose
// project ran out of sandbox time.
func (s *Service) heartbeatShells(ctx context.Context) {
	if s.terms == nil {
		return
	}
	s.terms.mu.Lock()
	live := make([]*shell, 0, len(s.terms.all))
	ids := make([]string, 0, len(s.terms.all))
	for id, sh := range s.terms.all {
		live = append(live, sh)
		ids = append(ids, id)
	}
	s.terms.mu.Unlock()
	now := s.now()
	lost, err := s.db.HeartbeatTerminals(ctx, s.sb.Instance, ids, now)
	if err != nil {
		s.log.Warn("terminal leases not renewed", "err", err)
		return
	}
	for _, sh := range live {
		switch {
		case lost[sh.t.ID()]:
			s.log.Info("terminal lease lost; closing its shell", "terminal", sh.t.ID())
		case !s.mayStillEdit(ctx, sh):
			s.log.Info("terminal owner may no longer edit; closing the shell", "terminal", sh.t.ID())
		default:
			if err := s.sb.Meter.Renew(ctx, sh.res); err == nil {
				continue
			} else if !errors.Is(err, meter.ErrCap) {
				s.log.Warn("shell reservation not renewed", "terminal", sh.t.ID(), "err", err)
				continue
			}
			s.log.Info("sandbox time used up; closing the shell", "terminal", sh.t.ID())
		}
		sh.t.Close()
	}
	if _, err := s.db.LoseStaleTerminals(ctx, now.Add(-staleLease), now); err != nil {
		s.log.Warn("stale terminal leases not marked lost", "err", err)
	}
}

// mayStillEdit re-checks, from the database, that the shell's owner still
// holds code.edit on the project and the session is still open.
func (s *Service) mayStillEdit(ctx context.Context, sh *shell) bool {
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
	role, err := s.db.MemberRole(ctx, sh.projectID, sh.userID)
	switch {
	case errors.Is(err, models.ErrNotFound):
		return false
	case err != nil:
		return true
	}
	return auth.Can(auth.Role(role), auth.CodeEdit)
}

// shellProcess adapts a sandboxed process to what the terminal waits on.
type shellProcess struct{ p *sandbox.Process }

func (sp shellProcess) Pid() int { return sp.p.Pid() }

func (sp shellProcess) Wait() (terminal.Exit, error) {
	err := sp.p.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return terminal.Exit{Code: -1, Signal: unix.SignalName(ws.Signal())}, nil
		}
		return terminal.Exit{Code: ee.ExitCode()}, nil
	}
	if err != nil {
		return terminal.Exit{Code: -1}, err
	}
	return terminal.Exit{}, nil
}
