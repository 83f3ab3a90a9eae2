package editsession

import (
	"context"
	"errors"
	"time"

	"atelier/gitsvc"
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

// EndProjectSessions ends every session of a project being archived or
// deleted.
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
