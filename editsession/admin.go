package editsession

import (
	"context"
	"errors"
	"time"

	"atelier/fault"
	"atelier/models"
)

// What site admins see of sessions, commands and shells, and what they may
// do to them. Every action re-checks that its actor is a site admin: the
// route's check is not the only one.

// ErrNotSiteAdmin refuses an admin action to anyone else; it reads as a
// missing thing, as the dashboard's URLs do.
var ErrNotSiteAdmin = fault.New(fault.NotFound, "not_found", "editsession: only site admins may do this", "Not found.")

// OpenSession is an open session as site admins see it.
type OpenSession struct {
	ID         string    `json:"id"`
	ProjectID  int64     `json:"projectId"`
	Project    string    `json:"project"`
	UserID     int64     `json:"userId"`
	Username   string    `json:"username"`
	OpenedAt   time.Time `json:"openedAt"`
	LastSeenAt time.Time `json:"lastRequestAt"`
	// IdleLeft and MaxAgeLeft are how long the session has before the idle
	// and the age limit end it; zero once past.
	IdleLeft   time.Duration `json:"-"`
	MaxAgeLeft time.Duration `json:"-"`
	Paths      []string      `json:"changedPaths"`
}

// OpenSessions lists every open session, oldest first.
func (s *Sessions) OpenSessions(ctx context.Context) ([]OpenSession, error) {
	rows, err := s.db.OpenSessions(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]OpenSession, len(rows))
	for i, r := range rows {
		out[i] = OpenSession{
			ID: r.ID, ProjectID: r.ProjectID, Project: r.Project, UserID: r.UserID, Username: r.Username,
			OpenedAt: r.OpenedAt, LastSeenAt: r.LastSeenAt,
			IdleLeft:   max(r.LastSeenAt.Add(s.cfg.Idle).Sub(now), 0),
			MaxAgeLeft: max(r.OpenedAt.Add(s.cfg.MaxAge).Sub(now), 0),
			Paths:      r.Paths,
		}
	}
	return out, nil
}

// EndByAdmin ends session id for a site admin, with reason admin: its
// shells close, its commands' processes end and its sandbox time settles
// as at any end, and its owner's page answers 410 with the reason. A
// session that already ended is a *GoneError with the reason it ended for.
func (s *Sessions) EndByAdmin(ctx context.Context, admin *models.User, id string) error {
	if admin == nil || !admin.IsAdmin {
		return ErrNotSiteAdmin
	}
	cs, err := s.db.SessionByID(ctx, id)
	if errors.Is(err, models.ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if cs.State != models.SessionOpen {
		return &GoneError{Reason: *cs.CloseReason}
	}
	return s.end(ctx, cs, ReasonAdmin, admin.ID)
}
