// Package editsession is ADR 0029's edit session: a person's private,
// durable workspace on one project. Opening forks canonical (sharing its
// objects); every changed path lives in PostgreSQL as the full text or a
// deletion; reads go edits → the base tree in the object store → git. The
// session ends on discard, after the idle or age limit, when its project is
// deleted or its person may no longer edit it, and ending leaves nothing
// but a tombstone row; while its project is archived it is paused.
//
// Sessions runs a session's life and its files; Edits serves its edits to
// what runs for it (package workbench, which sees a session only through
// its Identity and those edits). This package knows nothing of sandboxes
// or terminals: what runs for a session is, to Sessions, only the Cleaners
// it runs when a session ends.
package editsession

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"atelier/auth"
	"atelier/events"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
	"atelier/workspace"
)

// Limits of one session (ADR 0029).
const (
	MaxFileBytes = 262_144
	MaxPaths     = 200
)

// Close reasons.
const (
	ReasonDiscarded      = "discarded"
	ReasonIdle           = "idle"
	ReasonMaxAge         = "max_age"
	ReasonArchived       = "archived"
	ReasonProjectDeleted = "project_deleted"
	ReasonAdmin          = "admin"
	ReasonSubmitted      = "submitted"
	// ReasonRevoked: the person left the project, was removed from it or
	// may no longer edit it.
	ReasonRevoked = "revoked"
	// ReasonDisabled: a site admin disabled the person's account.
	ReasonDisabled = "disabled"
)

var (
	// ErrNotFound is a session that does not exist or is someone else's:
	// the two look the same from outside.
	ErrNotFound     = fault.New(fault.NotFound, "not_found", "editsession: no such session", "There is no such session.")
	ErrBinary       = fault.New(fault.Unsupported, "binary", "editsession: only text files can be edited (this one has a NUL byte)", "Only text files can be edited (this one has a NUL byte).")
	ErrTooLarge     = fault.New(fault.TooLarge, "too_large", fmt.Sprintf("editsession: a file is at most %d bytes", MaxFileBytes), fmt.Sprintf("A file is at most %d bytes.", MaxFileBytes))
	ErrTooManyPaths = fault.New(fault.Conflict, "too_many_paths", fmt.Sprintf("editsession: a session changes at most %d paths", MaxPaths), fmt.Sprintf("A session changes at most %d paths.", MaxPaths))
	ErrStale        = fault.New(fault.PreconditionFailed, "stale", "editsession: the file changed since you loaded it (another tab?)", "The file changed since you loaded it (another tab?).")
	ErrNoBase       = fault.New(fault.Conflict, "no_base", "editsession: the project's folder is not a git repository with a commit, so there is nothing to fork", "The project's folder is not a git repository with a commit, so there is nothing to fork.")
	ErrFileNotFound = fault.New(fault.NotFound, "not_found", "editsession: no such file", "No such file.")
	ErrEmptyCommand = fault.New(fault.BadInput, "empty_command", "editsession: type a command to run", "Type a command to run.")
	// ErrTooManySessions and ErrDiskFull refuse an opening past
	// Config.MaxPerUser and Config.DiskTotal; refusals name the figures
	// (Sessions.admit).
	ErrTooManySessions = fault.New(fault.Limit, "too_many_sessions", "editsession: the person holds as many open sessions as one may",
		"You have as many edit sessions open as one person may.")
	ErrDiskFull = fault.New(fault.Full, "sandbox_disk_full", "editsession: another session's disk would pass the sessions' total",
		"The server has no room for another edit session's disk.")
)

// DefaultMaxPerUser is how many sessions one person holds open at once,
// across projects, unless configured.
const DefaultMaxPerUser = 4

// GoneError is a request to a session that has ended.
type GoneError struct{ Reason string }

func (e *GoneError) Error() string { return "editsession: the session has ended: " + goneWhy[e.Reason] }

// Fault answers 410 with the reason the session ended.
func (e *GoneError) Fault() fault.Fault {
	return fault.Fault{Kind: fault.Gone, Reason: e.Reason, Message: "The session has ended: " + goneWhy[e.Reason] + "."}
}

// goneWhy says why a session ended, by its close reason.
var goneWhy = map[string]string{
	ReasonDiscarded:      "it was discarded",
	ReasonIdle:           "nothing happened in it for too long",
	ReasonMaxAge:         "it reached its maximum age",
	ReasonArchived:       "the project was archived",
	ReasonProjectDeleted: "the project was deleted",
	ReasonAdmin:          "a site admin ended it",
	ReasonSubmitted:      "it was submitted",
	ReasonRevoked:        "you may no longer edit the project",
	ReasonDisabled:       "your account was disabled",
}

// Config holds the limits of time, how many sandbox users sessions draw
// theirs from, and how many sessions may be open.
type Config struct {
	Idle   time.Duration // CODE_SESSION_IDLE_MS
	MaxAge time.Duration // CODE_SESSION_MAX_MS
	// SandboxSlots is the size of the block of uids sessions run as
	// (Sandboxes.UIDCount); 0 opens sessions without one.
	SandboxSlots uint32
	// MaxPerUser bounds the sessions one person holds open across
	// projects (ATELIER_MAX_SESSIONS_PER_USER); 0: no bound.
	MaxPerUser int
	// DiskBytes is each session's disk (Sandboxes.DiskBytes) and DiskTotal
	// what all sessions' disks may add up to (ATELIER_SANDBOX_DISK_TOTAL).
	// A session counts with its whole disk from its opening to its end,
	// used or not, since it may fill it at any time: so an opening that
	// fits leaves every open session its disk. 0 in either: no bound.
	DiskBytes, DiskTotal int64
}

// DefaultConfig is ADR 0029's: 10 idle minutes, 2 hours in all; and four
// sessions a person.
var DefaultConfig = Config{Idle: 10 * time.Minute, MaxAge: 2 * time.Hour, MaxPerUser: DefaultMaxPerUser}

// Cleaner removes what another part of Atelier keeps for a session (its
// shells; its processes and checkout). It must be safe to call again.
type Cleaner interface {
	EndSession(ctx context.Context, cs *models.CodeSession) error
}

// Sessions runs edit sessions and their files.
type Sessions struct {
	db       *models.Store
	git      *gitsvc.Service
	code     *codestore.Store
	ws       *workspace.Workspaces
	events   *events.Recorder
	cfg      Config
	now      func() time.Time
	log      *slog.Logger
	cleaners []Cleaner // in order, each time a session ends
	bases    *lru.Cache[string, sessionBase]
	// tell carries the id of a session that ended here to the other
	// instances (TellPeers), whose cleaners end what they keep of it.
	tell func(ctx context.Context, sessionID string)
}

// Options are what Sessions work with.
type Options struct {
	DB        *models.Store
	Git       *gitsvc.Service // the sessions' forks
	Code      *codestore.Store
	Workspace *workspace.Workspaces
	Events    *events.Recorder
	Config    Config
	Now       func() time.Time
	Log       *slog.Logger
	// Cleaners run, in order, whenever a session ends.
	Cleaners []Cleaner
}

// New returns the sessions.
func New(o Options) *Sessions {
	bases, _ := lru.New[string, sessionBase](cachedBases) // fails only for a size below 1
	return &Sessions{db: o.DB, git: o.Git, code: o.Code, ws: o.Workspace, events: o.Events, cfg: o.Config, now: o.Now,
		log: o.Log, cleaners: o.Cleaners, bases: bases}
}

// forkName is the git service's repository of session id: edit_<hex> forks
// into edit-<hex>. It derives from the row id alone.
func forkName(id string) string { return "edit-" + strings.TrimPrefix(id, "edit_") }

func newID() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails
	return "edit_" + hex.EncodeToString(b)
}

// Session is an open session with what requests need of it.
type Session struct {
	*models.CodeSession
	Project      *models.Project
	Source       codestore.Source // the fork at the base commit
	IdleDeadline time.Time
	MaxDeadline  time.Time
}

// Open returns the person's open session on the project, opening one when
// there is none; created says which. The handler has checked code.edit.
func (s *Sessions) Open(ctx context.Context, acc *projects.Access) (*Session, bool, error) {
	if existing, err := s.db.OpenSessionOf(ctx, acc.Project.ID, acc.User.ID); err == nil {
		sess, err := s.Get(ctx, acc, existing.ID, true)
		var gone *GoneError
		if !errors.As(err, &gone) {
			return sess, false, err
		}
		// It had just expired: it is ended now, so open a fresh one.
	} else if !errors.Is(err, models.ErrNotFound) {
		return nil, false, err
	}

	base, baseRepo, err := s.base(ctx, acc.Project)
	if err != nil {
		return nil, false, err
	}
	// The fork comes first, so a session row always has its fork; a fork
	// left by a crash before its row is what maintenance removes.
	now := s.now()
	cs := &models.CodeSession{ID: newID(), ProjectID: acc.Project.ID, UserID: acc.User.ID, BaseCommit: base,
		State: models.SessionOpen, OpenedAt: now, LastSeenAt: now}
	if _, err := s.git.Fork(ctx, baseRepo, base, forkName(cs.ID)); err != nil {
		return nil, false, err
	}
	if err := s.insert(ctx, cs); err != nil {
		if rmErr := s.git.RemoveRepo(ctx, forkName(cs.ID)); rmErr != nil {
			s.log.Warn("fork of a session that was not created left behind", "repo", forkName(cs.ID), "err", rmErr)
		}
		var ce *models.ConstraintError
		if errors.Is(err, errOpenedMeanwhile) || errors.As(err, &ce) && ce.Constraint == "code_sessions_one_open" {
			// A concurrent open won; that one is the person's session.
			won, err := s.db.OpenSessionOf(ctx, acc.Project.ID, acc.User.ID)
			if err != nil {
				return nil, false, err
			}
			sess, err := s.Get(ctx, acc, won.ID, true)
			return sess, false, err
		}
		return nil, false, err
	}
	s.record(ctx, events.SessionOpened, cs, acc.User.ID, map[string]any{"session": cs.ID, "baseCommit": base})
	sess, err := s.Get(ctx, acc, cs.ID, false)
	return sess, true, err
}

// errOpenedMeanwhile: a concurrent opening of the person's session on the
// project won while this one made its fork.
var errOpenedMeanwhile = errors.New("editsession: the session was opened meanwhile")

// insert records the session, if the bounds on open sessions let it in,
// with a sandbox slot of its own: a random one, drawn again on the rare
// clash with a live session's. The count and the insert are one
// transaction under the locks SessionCountsLocked takes, so openings at
// once cannot together pass a bound.
func (s *Sessions) insert(ctx context.Context, cs *models.CodeSession) error {
	return s.db.Tx(ctx, func(tx *models.Store) error { return s.insertIn(ctx, tx, cs) })
}

// insertIn is insert in the caller's transaction tx.
func (s *Sessions) insertIn(ctx context.Context, tx *models.Store, cs *models.CodeSession) error {
	n, err := tx.SessionCountsLocked(ctx, cs.UserID, cs.ProjectID, s.boundsDisks())
	if err != nil {
		return err
	}
	if n.Disabled {
		return auth.ErrDisabled
	}
	if n.Here {
		return errOpenedMeanwhile
	}
	if err := s.admit(n); err != nil {
		return err
	}
	for try := 0; ; try++ {
		if s.cfg.SandboxSlots > 0 {
			slot := int32(mrand.Uint32N(s.cfg.SandboxSlots))
			cs.SandboxSlot = &slot
		}
		// A savepoint, so that a clash leaves the transaction usable for
		// the next draw.
		err := tx.Tx(ctx, func(tx *models.Store) error { return tx.CreateSession(ctx, cs) })
		var ce *models.ConstraintError
		if errors.As(err, &ce) && ce.Constraint == "code_sessions_sandbox_slot_live" && try < 10 {
			continue
		}
		return err
	}
}

// boundsDisks says whether the sessions' disks are bounded in total.
func (s *Sessions) boundsDisks() bool { return s.cfg.DiskBytes > 0 && s.cfg.DiskTotal > 0 }

// admit refuses one more session past the person's bound or past the
// sessions' disk total, given what is open.
func (s *Sessions) admit(n models.SessionCounts) error {
	if s.cfg.MaxPerUser > 0 && n.Mine >= s.cfg.MaxPerUser {
		return fault.Detailf(ErrTooManySessions, " (%d, in other projects); submit or discard one of them to open another", n.Mine)
	}
	if s.boundsDisks() && int64(n.Live+1)*s.cfg.DiskBytes > s.cfg.DiskTotal {
		return fault.Detailf(ErrDiskFull, ": the %d sessions on it hold %s of the %s set aside for all sessions' disks; try again once one has ended",
			n.Live, diskSize(int64(n.Live)*s.cfg.DiskBytes), diskSize(s.cfg.DiskTotal))
	}
	return nil
}

// diskSize writes a size of disk in the unit a person reads it in.
func diskSize(n int64) string {
	switch {
	case n < 1<<30:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// base is the commit a new session starts from, and the repository holding
// it: canonical for a Container project, the folder's own repository for a
// Local one.
func (s *Sessions) base(ctx context.Context, p *models.Project) (string, *gitsvc.Repo, error) {
	if p.WorkspaceMode != models.ModeLocal {
		repo, err := s.git.OpenBare(projects.CanonicalName(p.ID))
		if err != nil {
			return "", nil, err
		}
		if p.CanonicalCommit == nil {
			return "", nil, ErrNoBase
		}
		return *p.CanonicalCommit, repo, nil
	}
	l, err := s.ws.OpenLocal(projects.Location(p))
	if err != nil {
		return "", nil, err
	}
	defer l.Close()
	repo, err := s.git.OpenLocal(ctx, l.Path()) // why a path: workspace.LocalFS.Path
	if errors.Is(err, gitsvc.ErrNotRepository) {
		return "", nil, ErrNoBase
	}
	if err != nil {
		return "", nil, err
	}
	commit, _, err := s.git.Head(ctx, repo)
	if errors.Is(err, gitsvc.ErrNotFound) {
		return "", nil, ErrNoBase
	}
	return commit, repo, err
}

// ownOpen checks a session row as it was read (err its reading's error):
// ErrNotFound unless it is acc's on acc's project, a *GoneError once it
// has ended.
func ownOpen(cs *models.CodeSession, err error, acc *projects.Access) error {
	switch {
	case errors.Is(err, models.ErrNotFound):
		return ErrNotFound
	case err != nil:
		return err
	case cs.UserID != acc.User.ID || cs.ProjectID != acc.Project.ID:
		return ErrNotFound
	case cs.State != models.SessionOpen:
		return &GoneError{Reason: *cs.CloseReason}
	}
	return nil
}

// Get returns the caller's session id on the project after checking, from
// the database, that it is theirs and still open, and the limits first: an
// expired session is ended here and the caller gets a *GoneError. touch
// says whether the request counts as activity.
func (s *Sessions) Get(ctx context.Context, acc *projects.Access, id string, touch bool) (*Session, error) {
	return s.GetRead(ctx, acc, id, nil, touch)
}

// GetRead is Get of a session whose row the caller may have read already
// (projects.Service.AuthorizeSession); nil reads it here.
func (s *Sessions) GetRead(ctx context.Context, acc *projects.Access, id string, cs *models.CodeSession, touch bool) (*Session, error) {
	var err error
	if cs == nil || cs.ID != id {
		cs, err = s.db.SessionByID(ctx, id)
	}
	if err := ownOpen(cs, err, acc); err != nil {
		return nil, err
	}
	now := s.now()
	if reason := s.overdue(cs, acc.Project, now); reason != "" {
		if err := s.end(ctx, cs, reason, 0); err != nil {
			return nil, err
		}
		return nil, &GoneError{Reason: reason}
	}
	if touch && now.Sub(cs.LastSeenAt) >= touchEvery {
		if err := s.db.TouchSession(ctx, cs.ID, now); err != nil {
			return nil, err
		}
		cs.LastSeenAt = now
	}
	return s.session(cs, acc.Project)
}

// touchEvery is how stale a session's last activity may be before a
// request writes it again. The idle deadline counts in minutes, so
// back-to-back requests (a command after a save, a burst of saves) need not
// each cost a write.
const touchEvery = time.Second

// session is the open row cs of project p with its fork and deadlines.
func (s *Sessions) session(cs *models.CodeSession, p *models.Project) (*Session, error) {
	repo, err := s.git.OpenBare(forkName(cs.ID))
	if err != nil {
		return nil, fmt.Errorf("editsession: fork of %s: %w", cs.ID, err)
	}
	s.bases.Add(cs.ID, sessionBase{userID: cs.UserID, projectID: cs.ProjectID, commit: cs.BaseCommit})
	return s.sessionIn(cs, p, repo), nil
}

// sessionIn is the session of row cs, whose fork is repo.
func (s *Sessions) sessionIn(cs *models.CodeSession, p *models.Project, repo *gitsvc.Repo) *Session {
	return &Session{
		CodeSession:  cs,
		Project:      p,
		Source:       codestore.Source{Repo: repo, Commit: cs.BaseCommit},
		IdleDeadline: cs.LastSeenAt.Add(s.cfg.Idle),
		MaxDeadline:  cs.OpenedAt.Add(s.cfg.MaxAge),
	}
}

// LoadOpen loads an open session for the server's own work (no caller to
// check), or ErrNotFound / *GoneError.
func (s *Edits) LoadOpen(ctx context.Context, id string) (Identity, error) {
	cs, err := s.db.SessionByID(ctx, id)
	if errors.Is(err, models.ErrNotFound) {
		return Identity{}, ErrNotFound
	}
	if err != nil {
		return Identity{}, err
	}
	if cs.State != models.SessionOpen {
		return Identity{}, &GoneError{Reason: *cs.CloseReason}
	}
	p, err := s.db.ProjectByID(ctx, cs.ProjectID)
	if err != nil {
		return Identity{}, err
	}
	repo, err := s.git.OpenBare(forkName(cs.ID))
	if err != nil {
		return Identity{}, err
	}
	sess := &Session{CodeSession: cs, Project: p, Source: codestore.Source{Repo: repo, Commit: cs.BaseCommit}}
	return sess.Identity(), nil
}

// overdue says why an open session must end now, or "". A session of an
// archived project is paused, not ended: its edits and fork stay, it takes
// no change (editable), and its limits count again from the unarchive
// (ResumeProjectSessions). ADR 0029 ended such sessions and dropped their
// edits; here an archive can be undone, and a project admin's archive of
// the owner's project must not cost the owner their work.
func (s *Sessions) overdue(cs *models.CodeSession, p *models.Project, now time.Time) string {
	switch {
	case p.Archived():
		return ""
	case !now.Before(cs.OpenedAt.Add(s.cfg.MaxAge)):
		return ReasonMaxAge
	case !now.Before(cs.LastSeenAt.Add(s.cfg.Idle)):
		return ReasonIdle
	}
	return ""
}

// editable refuses any change to a paused session (its project is
// archived): its files, commands and shells wait for the unarchive.
// Reading it, and discarding it, stay open to its person.
func editable(sess *Session) error {
	if sess.Project.Archived() {
		return projects.ErrArchived
	}
	return nil
}

// Discard ends the session and drops its edits.
func (s *Sessions) Discard(ctx context.Context, sess *Session) error {
	return s.end(ctx, sess.CodeSession, ReasonDiscarded, sess.UserID)
}

// FinishSubmitted ends a session whose submit moved it to ending (in the
// transaction that recorded its Change) and records that it was submitted
// as changeID.
func (s *Sessions) FinishSubmitted(ctx context.Context, cs *models.CodeSession, actor, changeID int64) error {
	if err := s.end(ctx, cs, ReasonSubmitted, actor); err != nil {
		return err
	}
	s.record(ctx, events.SessionClosed, cs, actor, map[string]any{"session": cs.ID, "reason": ReasonSubmitted})
	s.record(ctx, events.SessionSubmitted, cs, actor, map[string]any{"session": cs.ID, "changeId": changeID})
	return nil
}

// end ends a session for reason: it marks the row ending (so the reason is
// decided once), removes the fork, the edits and whatever cleaners keep,
// then marks it closed. An interrupted end is finished by the next call or
// the sweeper; every step may run again.
func (s *Sessions) end(ctx context.Context, cs *models.CodeSession, reason string, actor int64) error {
	began, err := s.db.BeginEndSession(ctx, cs.ID, reason)
	if err != nil {
		return err
	}
	for _, c := range s.cleaners {
		if err := c.EndSession(ctx, cs); err != nil {
			return fmt.Errorf("editsession: end %s: %w", cs.ID, err)
		}
	}
	if s.tell != nil {
		s.tell(ctx, cs.ID)
	}
	if err := s.git.RemoveRepo(ctx, forkName(cs.ID)); err != nil && !errors.Is(err, gitsvc.ErrNotFound) {
		return fmt.Errorf("editsession: end %s: %w", cs.ID, err)
	}
	if err := s.db.FinishEndSession(ctx, cs.ID, s.now()); err != nil {
		return err
	}
	if began {
		s.record(ctx, events.SessionClosed, cs, actor, map[string]any{"session": cs.ID, "reason": reason})
	}
	return nil
}

// TellPeers has every session that ends here told to the other instances
// by tell. Set it before serving.
func (s *Sessions) TellPeers(tell func(ctx context.Context, sessionID string)) { s.tell = tell }

// EndedElsewhere has this instance's cleaners end what they keep of the
// sessions ids that another instance ended: the shells and commands of a
// session whose runtime this instance held. A session still open is left
// alone, whoever named it.
func (s *Sessions) EndedElsewhere(ctx context.Context, ids ...string) error {
	var errs []error
	for _, id := range ids {
		cs, err := s.db.SessionByID(ctx, id)
		if errors.Is(err, models.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cs.State == models.SessionOpen {
			continue
		}
		for _, c := range s.cleaners {
			if err := c.EndSession(ctx, cs); err != nil {
				errs = append(errs, fmt.Errorf("editsession: end %s here: %w", id, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (s *Sessions) record(ctx context.Context, typ string, cs *models.CodeSession, actor int64, data map[string]any) {
	err := s.events.Record(ctx, events.Event{Type: typ, ProjectID: cs.ProjectID, ActorID: actor, Data: data})
	if err != nil {
		s.log.Warn("event not recorded", "type", typ, "session", cs.ID, "err", err)
	}
}
