package models

import (
	"context"
	"fmt"
	"time"
)

// OwnedProjectsLocked locks the user's row until the transaction ends and
// returns how many projects they own. Two creations by one person
// serialize on the lock, so a count taken here and a project inserted in
// the same transaction cannot both pass a bound the other also passed.
func (s *Store) OwnedProjectsLocked(ctx context.Context, userID int64) (int, error) {
	var locked []int64
	if err := s.db.WithContext(ctx).Raw(`SELECT id FROM users WHERE id = ? FOR UPDATE`, userID).Scan(&locked).Error; err != nil {
		return 0, fmt.Errorf("models: lock user %d: %w", userID, translate(err))
	}
	if len(locked) == 0 {
		return 0, fmt.Errorf("models: lock user %d: %w", userID, ErrNotFound)
	}
	var n int
	err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM project_members WHERE user_id = ? AND role = ?`, userID, RoleOwner).
		Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("models: projects of user %d: %w", userID, translate(err))
	}
	return n, nil
}

// throttleLockSpace is the first key of the advisory locks that serialize
// one person's throttled actions; the second is the user's id.
const throttleLockSpace = 0x7468726f // "thro"

// AddEventWithin appends e unless its actor already has max events of its
// type younger than window, by the database's clock. When refused, it
// returns how long until the oldest of them leaves the window. An advisory
// lock per actor makes the count and the insert one step, so concurrent
// requests of one person cannot all pass.
func (s *Store) AddEventWithin(ctx context.Context, e *Event, window time.Duration, max int) (admitted bool, retryAfter time.Duration, err error) {
	if e.ActorID == nil {
		return false, 0, fmt.Errorf("models: throttled event %s without an actor", e.Type)
	}
	err = s.Tx(ctx, func(tx *Store) error {
		db := tx.db.WithContext(ctx)
		if err := db.Exec(`SELECT pg_advisory_xact_lock(?, ?)`, throttleLockSpace, int32(*e.ActorID)).Error; err != nil {
			return err
		}
		var w struct {
			N     int
			Until float64 // seconds until the oldest leaves the window
		}
		err := db.Raw(`SELECT count(*) AS n,
			COALESCE(EXTRACT(EPOCH FROM min(created_at) + make_interval(secs => ?) - now()), 0) AS until
			FROM events WHERE type = ? AND actor_id = ? AND created_at > now() - make_interval(secs => ?)`,
			window.Seconds(), e.Type, *e.ActorID, window.Seconds()).Scan(&w).Error
		if err != nil {
			return err
		}
		if w.N >= max {
			retryAfter = time.Duration(w.Until * float64(time.Second))
			return nil
		}
		admitted = true
		return db.Create(e).Error
	})
	if err != nil {
		return false, 0, fmt.Errorf("models: event %s: %w", e.Type, translate(err))
	}
	return admitted, retryAfter, nil
}
