package editsession

import (
	"context"
	"errors"
	"time"

	"atelier/gitsvc"
	"atelier/models"
)

// SweepEvery is how often Run ends overdue sessions; MaintainEvery how often
// it removes leftovers nothing else would.
const (
	SweepEvery    = time.Minute
	MaintainEvery = 24 * time.Hour
)

// Sweep ends every session past a limit and finishes ends that were
// interrupted. It returns how many it ended.
func (s *Sessions) Sweep(ctx context.Context) (int, error) {
	now := s.now()
	overdue, err := s.db.OverdueSessions(ctx, now.Add(-s.cfg.Idle), now.Add(-s.cfg.MaxAge))
	if err != nil {
		return 0, err
	}
	var errs []error
	ended := 0
	for i := range overdue {
		cs := &overdue[i]
		reason := ""
		if cs.CloseReason != nil {
			reason = *cs.CloseReason // an interrupted end keeps its reason
		} else {
			p, err := s.db.ProjectByID(ctx, cs.ProjectID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if reason = s.overdue(cs, p, now); reason == "" {
				continue
			}
		}
		if err := s.end(ctx, cs, reason, 0); err != nil {
			errs = append(errs, err)
			continue
		}
		ended++
	}
	return ended, errors.Join(errs...)
}

// Maintain removes forks that no open or ending session owns, such as one
// left by a crash between creating a fork and recording its session.
func (s *Sessions) Maintain(ctx context.Context) error {
	if _, err := s.Sweep(ctx); err != nil {
		s.log.Warn("maintenance sweep: ending overdue sessions", "err", err)
	}
	names, err := s.git.Names("edit-")
	if err != nil {
		return err
	}
	unfinished, err := s.db.UnfinishedSessions(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, cs := range unfinished {
		live[forkName(cs.ID)] = true
	}
	var errs []error
	for _, name := range names {
		if live[name] {
			continue
		}
		if err := s.git.RemoveRepo(ctx, name); err != nil && !errors.Is(err, gitsvc.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		s.log.Info("removed an orphaned session fork", "repo", name)
	}
	return errors.Join(errs...)
}

// EndProjectSessions ends every session of a project being deleted.
func (s *Sessions) EndProjectSessions(ctx context.Context, projectID int64, reason string) error {
	css, err := s.db.UnfinishedSessionsOf(ctx, projectID)
	if err != nil {
		return err
	}
	var errs []error
	for i := range css {
		r := reason
		if css[i].CloseReason != nil {
			r = *css[i].CloseReason
		}
		errs = append(errs, s.end(ctx, &css[i], r, 0))
	}
	return errors.Join(errs...)
}

// EndMemberSessions ends the person's open session on a project they left,
// were removed from or may no longer edit (reason revoked): they could not
// reach it any more, and it would hold a place in their bound until its
// limits ended it, which on an archived project is never.
func (s *Sessions) EndMemberSessions(ctx context.Context, projectID, userID int64) error {
	css, err := s.db.OpenSessionsOfMember(ctx, projectID, userID)
	if err != nil {
		return err
	}
	var errs []error
	for i := range css {
		errs = append(errs, s.end(ctx, &css[i], ReasonRevoked, 0))
	}
	return errors.Join(errs...)
}

// EndPersonSessions ends every open session of a person whose account a
// site admin (by) disabled, with reason disabled: their shells close and
// their commands' processes end with them, here at once and on other
// instances at their next heartbeat.
func (s *Sessions) EndPersonSessions(ctx context.Context, userID, by int64) error {
	css, err := s.db.OpenSessionsOfUser(ctx, userID)
	if err != nil {
		return err
	}
	var errs []error
	for i := range css {
		errs = append(errs, s.end(ctx, &css[i], ReasonDisabled, by))
	}
	return errors.Join(errs...)
}

// ProjectCleaner is a Cleaner that also keeps something for a project as
// a whole, beside its sessions' own.
type ProjectCleaner interface {
	EndProject(ctx context.Context, p *models.Project) error
}

// EndProject removes, once the project's sessions have ended and its row
// is gone, what the cleaners keep for the project as a whole.
func (s *Sessions) EndProject(ctx context.Context, p *models.Project) error {
	var errs []error
	for _, c := range s.cleaners {
		if pc, ok := c.(ProjectCleaner); ok {
			errs = append(errs, pc.EndProject(ctx, p))
		}
	}
	return errors.Join(errs...)
}

// ResumeProjectSessions, in the transaction tx that unarchives the
// project, restarts its paused sessions' limits: each keeps the age it had
// left when the project was archived at pausedSince, and its idle limit
// counts from now.
func (s *Sessions) ResumeProjectSessions(ctx context.Context, tx *models.Store, projectID int64, pausedSince time.Time) error {
	return tx.ResumeSessions(ctx, projectID, pausedSince, s.now())
}

// Run sweeps every minute and maintains every day until ctx ends.
func (s *Sessions) Run(ctx context.Context) {
	if err := s.Maintain(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("session maintenance failed", "err", err)
	}
	sweep := time.NewTicker(SweepEvery)
	defer sweep.Stop()
	maintain := time.NewTicker(MaintainEvery)
	defer maintain.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("session sweep failed", "err", err)
			} else if n > 0 {
				s.log.Info("overdue sessions ended", "count", n)
			}
		case <-maintain.C:
			if err := s.Maintain(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("session maintenance failed", "err", err)
			}
		}
	}
}
