package workbench

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"atelier/auth"
	"atelier/events"
	"atelier/fault"
	"atelier/models"
	"atelier/terminal"
)

// MaxShares bounds how many people one terminal is shared with.
const MaxShares = 32

// Errors of shares.
var (
	// ErrWatchOnly: a person who watches a terminal asked to type into it,
	// resize or close it.
	ErrWatchOnly = fault.New(fault.Forbidden, "watch_only", "workbench: a watcher may not type into a terminal",
		"You are watching this terminal; only the person who opened it can type into it, resize, close or share it.")
	ErrTooManyShares = fault.New(fault.Limit, "too_many_shares", "workbench: the terminal has as many shares as it may",
		"This terminal is already shared with as many people as it may be; revoke a share first.")
	ErrShareWithSelf = fault.New(fault.BadInput, "share_with_self", "workbench: a terminal's owner already sees it",
		"You already see your own terminal; choose another member of the project.")
)

// viewers are the watch streams open on this instance's terminals, so the
// owner sees who watches and a revoked share ends its streams at once.
type viewers struct {
	mu sync.Mutex
	// open is, per terminal, per person, the ends of their open streams.
	open map[string]map[int64]map[*int]context.CancelFunc
}

func (v *viewers) add(tid string, userID int64, cancel context.CancelFunc) (remove func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.open == nil {
		v.open = map[string]map[int64]map[*int]context.CancelFunc{}
	}
	if v.open[tid] == nil {
		v.open[tid] = map[int64]map[*int]context.CancelFunc{}
	}
	if v.open[tid][userID] == nil {
		v.open[tid][userID] = map[*int]context.CancelFunc{}
	}
	key := new(int)
	v.open[tid][userID][key] = cancel
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		delete(v.open[tid][userID], key)
		if len(v.open[tid][userID]) == 0 {
			delete(v.open[tid], userID)
		}
		if len(v.open[tid]) == 0 {
			delete(v.open, tid)
		}
	}
}

// end ends userID's streams of terminal tid.
func (v *viewers) end(tid string, userID int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, cancel := range v.open[tid][userID] {
		cancel()
	}
}

// viewer is one person watching one terminal here.
type viewer struct {
	tid    string
	userID int64
}

func (v *viewers) list() []viewer {
	v.mu.Lock()
	defer v.mu.Unlock()
	var all []viewer
	for tid, people := range v.open {
		for userID := range people {
			all = append(all, viewer{tid, userID})
		}
	}
	return all
}

func (v *viewers) watching(tid string, userID int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.open[tid][userID]) > 0
}

// Share is one person who may watch a terminal, and whether they watch now.
type Share struct {
	models.TerminalShare
	Watching bool `json:"watching"`
}

// ShareShell lets with, a member of the session's project (the caller
// checked that they may read it), watch the session's running shell tid.
func (s *Shells) ShareShell(ctx context.Context, session Session, tid string, with *models.User) error {
	sess := session.Identity()
	if _, err := s.Shell(session, tid); err != nil {
		return err
	}
	if with.ID == sess.UserID {
		return ErrShareWithSelf
	}
	err := s.db.ShareTerminal(ctx, tid, with.ID, MaxShares, s.now())
	switch {
	case errors.Is(err, models.ErrTooManyShares):
		return ErrTooManyShares
	case errors.Is(err, models.ErrNotFound):
		return terminal.ErrNotFound
	}
	return err
}

// UnshareShell revokes userID's share of the session's shell tid and ends
// their watch streams of it, which this instance serves as the shell's.
func (s *Shells) UnshareShell(ctx context.Context, session Session, tid string, userID int64) error {
	if _, err := s.Shell(session, tid); err != nil {
		return err
	}
	if _, err := s.db.UnshareTerminal(ctx, tid, userID); err != nil {
		return err
	}
	s.viewers.end(tid, userID)
	return nil
}

// Shares lists who may watch the session's shell tid, and who watches now.
func (s *Shells) Shares(ctx context.Context, session Session, tid string) ([]Share, error) {
	if _, err := s.Shell(session, tid); err != nil {
		return nil, err
	}
	rows, err := s.db.TerminalShares(ctx, tid)
	if err != nil {
		return nil, err
	}
	shares := make([]Share, len(rows))
	for i, r := range rows {
		shares[i] = Share{TerminalShare: r, Watching: s.viewers.watching(tid, r.UserID)}
	}
	return shares, nil
}

// SharedShell returns the lease of shell tid of session sessionID when it
// is shared with user, from the database: any instance can tell, and send
// the request on to the shell's. terminal.ErrNotFound otherwise.
func (s *Shells) SharedShell(ctx context.Context, user *models.User, sessionID, tid string) (*models.SharedTerminal, error) {
	lease, err := s.db.SharedTerminal(ctx, tid, user.ID)
	if errors.Is(err, models.ErrNotFound) || err == nil && lease.SessionID != sessionID {
		return nil, terminal.ErrNotFound
	}
	return lease, err
}

// ServeWatch streams the running shell tid of session sessionID on project
// projectID to user, who watches it through a share, until the stream
// ends or the share is revoked. It is the shell's instance that serves it.
func (s *Shells) ServeWatch(w http.ResponseWriter, r *http.Request, user *models.User, projectID int64, sessionID, tid string) error {
	if _, err := s.SharedShell(r.Context(), user, sessionID, tid); err != nil {
		return err
	}
	t, err := s.terms.Get(tid)
	if err != nil {
		return terminal.ErrNotFound
	}
	sh, ok := t.Tag().(*shell)
	if !ok || sh.sessionID != sessionID || sh.projectID != projectID || ended(t) {
		return terminal.ErrNotFound
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	remove := s.viewers.add(tid, user.ID, cancel)
	defer remove()
	s.tell(events.TopicTerminals)
	defer s.tell(events.TopicTerminals)
	return t.ServeStream(w, r.WithContext(ctx))
}

// checkViewers ends the watch streams of people who may watch no more:
// their share is gone (revoked, or they were deleted), or they can no
// longer read the project. The heartbeat calls it, so a person taken out
// of a project stops watching within LeaseEvery.
func (s *Shells) checkViewers(ctx context.Context) {
	for _, w := range s.viewers.list() {
		t, err := s.terms.Get(w.tid)
		if err != nil {
			continue // the stream ends with the shell
		}
		sh, ok := t.Tag().(*shell)
		if ok && !s.mayStillWatch(ctx, sh, w) {
			s.log.Info("a watcher may watch no more; ending their stream", "terminal", w.tid, "user", w.userID)
			s.viewers.end(w.tid, w.userID)
		}
	}
}

// mayStillWatch re-checks, from the database, that the share stands and
// the person still reads the shell's project. A database hiccup is no
// verdict: only a definite answer ends the watch.
func (s *Shells) mayStillWatch(ctx context.Context, sh *shell, w viewer) bool {
	_, err := s.db.SharedTerminal(ctx, w.tid, w.userID)
	switch {
	case errors.Is(err, models.ErrNotFound):
		return false
	case err != nil:
		return true
	}
	_, role, err := s.db.ProjectOfMember(ctx, sh.projectID, w.userID)
	switch {
	case errors.Is(err, models.ErrNotFound):
		return false
	case err != nil:
		return true
	}
	return auth.Can(auth.Role(role), auth.CodeRead)
}
