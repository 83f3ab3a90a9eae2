package models

import (
	"context"
	"fmt"
	"time"
)

// CreatedProjectsLocked locks the user's row until the transaction ends
// and returns how many of today's projects they created. Two creations by
// one person serialize on the lock, so a count taken here and a project
// inserted in the same transaction cannot both pass a bound the other also
// passed. Creations are what is counted, not ownership: ownership can be
// offered by others (and is accepted without a place in any bound), the
// creator is recorded once (projects_creator_fixed), so nobody can fill
// another person's count or empty their own but by deleting a project.
func (s *Store) CreatedProjectsLocked(ctx context.Context, userID int64) (int, error) {
	var locked []int64
	if err := s.db.WithContext(ctx).Raw(`SELECT id FROM users WHERE id = ? FOR UPDATE`, userID).Scan(&locked).Error; err != nil {
		return 0, fmt.Errorf("models: lock user %d: %w", userID, translate(err))
	}
	if len(locked) == 0 {
		return 0, fmt.Errorf("models: lock user %d: %w", userID, ErrNotFound)
	}
	return s.CreatedProjects(ctx, userID)
}

// CreatedProjects returns how many of today's projects the user created,
// with no lock: a look before slow work that CreatedProjectsLocked then
// decides on.
func (s *Store) CreatedProjects(ctx context.Context, userID int64) (int, error) {
	var n int
	err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM projects WHERE created_by = ?`, userID).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("models: projects created by user %d: %w", userID, translate(err))
	}
	return n, nil
}

// SessionCounts are what the opening of an edit session is bounded by.
type SessionCounts struct {
	Mine int  // the person's open sessions
	Here bool // one of them is on the project being opened
	// Live is everybody's sessions not yet closed: an ending one's disk
	// may still be there until its end finishes.
	Live int
	// Disabled says the person's account is disabled. Disabling takes the
	// same row, so an opening either sees it or ends before the disable's
	// ending of the person's sessions looks for them.
	Disabled bool `gorm:"-"`
}

// openingLockSpace is the first key of the advisory lock every opening of
// an edit session takes when a bound on everybody's sessions applies.
const openingLockSpace = 0x6f70656e // "open"

// SessionCountsLocked locks the person's user row and, when everyone is
// true, the lock all openings share, until the transaction ends, then
// counts the sessions. Two openings by one person serialize on the row, and
// with everyone all openings serialize, so a count taken here and a
// session inserted in the same transaction cannot both pass a bound
// another opening also passed. Every caller takes the row before the
// shared lock, so two openings never wait for each other in a circle.
func (s *Store) SessionCountsLocked(ctx context.Context, userID, projectID int64, everyone bool) (SessionCounts, error) {
	var n SessionCounts
	db := s.db.WithContext(ctx)
	var locked []struct{ Disabled bool }
	if err := db.Raw(`SELECT disabled_at IS NOT NULL AS disabled FROM users WHERE id = ? FOR UPDATE`, userID).Scan(&locked).Error; err != nil {
		return n, fmt.Errorf("models: lock user %d: %w", userID, translate(err))
	}
	if len(locked) == 0 {
		return n, fmt.Errorf("models: lock user %d: %w", userID, ErrNotFound)
	}
	if everyone {
		if err := db.Exec(`SELECT pg_advisory_xact_lock(?, 0)`, openingLockSpace).Error; err != nil {
			return n, fmt.Errorf("models: lock the openings of sessions: %w", translate(err))
		}
	}
	// Only rows not yet closed are read (code_sessions_unfinished).
	err := db.Raw(`SELECT count(*) FILTER (WHERE user_id = ? AND state = ?) AS mine,
		count(*) FILTER (WHERE user_id = ? AND project_id = ? AND state = ?) > 0 AS here,
		count(*) AS live
		FROM code_sessions WHERE state <> ?`, userID, SessionOpen, userID, projectID, SessionOpen, SessionClosed).
		Scan(&n).Error
	if err != nil {
		return n, fmt.Errorf("models: sessions of user %d: %w", userID, translate(err))
	}
	n.Disabled = locked[0].Disabled
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
		room, wait, err := tx.roomWithin(ctx, e.Type, *e.ActorID, window, max)
		if err != nil || !room {
			retryAfter = wait
			return err
		}
		admitted = true
		return db.Create(e).Error
	})
	if err != nil {
		return false, 0, fmt.Errorf("models: event %s: %w", e.Type, translate(err))
	}
	return admitted, retryAfter, nil
}

// RoomWithin tells whether AddEventWithin would admit one more event of
// the type for actor now, without adding it: a look before work that must
// not start when the bound is spent. Only AddEventWithin decides.
func (s *Store) RoomWithin(ctx context.Context, typ string, actor int64, window time.Duration, max int) (room bool, retryAfter time.Duration, err error) {
	if room, retryAfter, err = s.roomWithin(ctx, typ, actor, window, max); err != nil {
		return false, 0, fmt.Errorf("models: events %s: %w", typ, translate(err))
	}
	return room, retryAfter, nil
}

func (s *Store) roomWithin(ctx context.Context, typ string, actor int64, window time.Duration, max int) (bool, time.Duration, error) {
	var w struct {
		N     int
		Until float64 // seconds until the oldest leaves the window
	}
	err := s.db.WithContext(ctx).Raw(`SELECT count(*) AS n,
		COALESCE(EXTRACT(EPOCH FROM min(created_at) + make_interval(secs => ?) - now()), 0) AS until
		FROM events WHERE type = ? AND actor_id = ? AND created_at > now() - make_interval(secs => ?)`,
		window.Seconds(), typ, actor, window.Seconds()).Scan(&w).Error
	if err != nil || w.N < max {
		return err == nil, 0, err
	}
	return false, time.Duration(w.Until * float64(time.Second)), nil
}
