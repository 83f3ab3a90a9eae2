package editsession

import (
	"context"

	"atelier/events"
	"atelier/models"
	"atelier/projects"
)

// Rebase moves the caller's session id onto the project's current base
// (canonical's commit, or a Local folder's head): the session ends
// (discarded) and the person's next one opens there with every edit but
// those leave names, which Rebase returns. leave is given the paths edited
// and those the base changed since the session's; which edits a move
// leaves behind is the Change pipeline's rule (stale_base), so it is
// passed in.
//
// The old session's end, the new one's opening and the copy of the edits
// are one transaction, under the old session's row lock and the locks and
// bounds of an opening. No save lands in the old session once its edits
// are read, and no other opening (another tab, a session on another
// project taking the person's last place) comes in between: either the
// new session holds the edits, or the opening is refused (say
// ErrTooManySessions) and the old session is as it was, edits and all.
// The git work (the base's changes, the new fork) comes before the
// transaction.
func (s *Sessions) Rebase(ctx context.Context, acc *projects.Access, id string, leave func(edited, changed []string) []string) (*Session, []string, error) {
	old, err := s.Get(ctx, acc, id, true)
	if err != nil {
		return nil, nil, err
	}
	if err := editable(old); err != nil {
		return nil, nil, err
	}
	base, baseRepo, err := s.base(ctx, acc.Project)
	if err != nil {
		return nil, nil, err
	}
	var changed []string
	if base != old.BaseCommit {
		if changed, err = s.git.ChangedPaths(ctx, baseRepo, old.BaseCommit, base); err != nil {
			return nil, nil, err
		}
	}
	now := s.now()
	cs := &models.CodeSession{ID: newID(), ProjectID: acc.Project.ID, UserID: acc.User.ID, BaseCommit: base,
		State: models.SessionOpen, OpenedAt: now, LastSeenAt: now}
	if _, err := s.git.Fork(ctx, baseRepo, base, forkName(cs.ID)); err != nil {
		return nil, nil, err
	}
	var left []string
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		locked, err := tx.LockSession(ctx, id)
		if err := ownOpen(locked, err, acc); err != nil {
			return err
		}
		ps, err := tx.SessionPaths(ctx, id)
		if err != nil {
			return err
		}
		edited := make([]string, len(ps))
		for i, p := range ps {
			edited[i] = p.Path
		}
		left = leave(edited, changed)
		// Ending first frees the person's place on the project for the
		// new session, and its place among their open sessions.
		if _, err := tx.BeginEndSession(ctx, id, ReasonDiscarded); err != nil {
			return err
		}
		if err := s.insertIn(ctx, tx, cs); err != nil {
			return err
		}
		return tx.CopySessionFiles(ctx, id, cs.ID, left, now)
	})
	if err != nil {
		if rmErr := s.git.RemoveRepo(context.WithoutCancel(ctx), forkName(cs.ID)); rmErr != nil {
			s.log.Warn("fork of a session that was not created left behind", "repo", forkName(cs.ID), "err", rmErr)
		}
		return nil, nil, err
	}
	// The rest of the old session's end (fork, checkout, edits) may be
	// retried by the sweeper; the new session stands either way.
	if err := s.end(ctx, old.CodeSession, ReasonDiscarded, acc.User.ID); err != nil {
		s.log.Warn("rebased session not finished; the sweeper will", "session", id, "err", err)
	}
	s.record(ctx, events.SessionClosed, old.CodeSession, acc.User.ID, map[string]any{"session": id, "reason": ReasonDiscarded})
	s.record(ctx, events.SessionOpened, cs, acc.User.ID, map[string]any{"session": cs.ID, "baseCommit": base})
	next, err := s.Get(ctx, acc, cs.ID, false)
	return next, left, err
}
