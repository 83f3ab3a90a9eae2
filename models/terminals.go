package models

import (
	"context"
	"fmt"
	"time"
)

// Terminal states.
const (
	TerminalLive   = "live"
	TerminalClosed = "closed"
	TerminalLost   = "lost"
)

// Terminal is the lease of one interactive shell.
type Terminal struct {
	ID          string     `json:"id"`
	SessionID   string     `json:"sessionId"`
	UserID      int64      `json:"-"`
	Instance    string     `json:"-"`
	State       string     `json:"state"`
	OpenedAt    time.Time  `json:"openedAt"`
	HeartbeatAt time.Time  `json:"-"`
	ClosedAt    *time.Time `json:"closedAt,omitempty"`
}

// ClaimTerminal records t's lease, live, unless its owner already holds
// max live leases renewed since staleBefore, on any instance: a lease
// nobody renewed since belongs to no running shell. The owner's user row
// stays locked until the lease is written, so two claims of one person,
// through any instances, cannot both take the last place. FOR NO KEY
// UPDATE, unlike FOR UPDATE, lets rows that refer to the person be
// written meanwhile.
func (s *Store) ClaimTerminal(ctx context.Context, t *Terminal, max int, staleBefore time.Time) (claimed bool, err error) {
	err = s.Tx(ctx, func(tx *Store) error {
		db := tx.db.WithContext(ctx)
		var locked []int64
		if err := db.Raw(`SELECT id FROM users WHERE id = ? FOR NO KEY UPDATE`, t.UserID).Scan(&locked).Error; err != nil {
			return err
		}
		if len(locked) == 0 {
			return ErrNotFound
		}
		var n int
		if err := db.Raw(`SELECT count(*) FROM terminals WHERE user_id = ? AND state = ? AND heartbeat_at >= ?`,
			t.UserID, TerminalLive, staleBefore).Scan(&n).Error; err != nil {
			return err
		}
		if n >= max {
			return nil
		}
		claimed = true
		return db.Create(t).Error
	})
	if err != nil {
		return false, fmt.Errorf("models: claim terminal of user %d: %w", t.UserID, translate(err))
	}
	return claimed, nil
}

// TerminalByID returns the lease, or ErrNotFound.
func (s *Store) TerminalByID(ctx context.Context, id string) (*Terminal, error) {
	var t Terminal
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&t).Error; err != nil {
		return nil, fmt.Errorf("models: terminal %s: %w", id, translate(err))
	}
	return &t, nil
}

// LiveTerminalsOf lists the live shells of a session, oldest first.
func (s *Store) LiveTerminalsOf(ctx context.Context, sessionID string) ([]Terminal, error) {
	var ts []Terminal
	err := s.db.WithContext(ctx).Where("session_id = ? AND state = ?", sessionID, TerminalLive).Order("opened_at").Find(&ts).Error
	if err != nil {
		return nil, fmt.Errorf("models: terminals of %s: %w", sessionID, err)
	}
	return ts, nil
}

// HeartbeatTerminals renews the leases of ids, all run by instance, and
// returns the ids whose lease is no longer live (ended elsewhere).
func (s *Store) HeartbeatTerminals(ctx context.Context, instance string, ids []string, now time.Time) (map[string]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var renewed []string
	err := s.db.WithContext(ctx).Raw(
		`UPDATE terminals SET heartbeat_at = ? WHERE id IN ? AND instance = ? AND state = ? RETURNING id`,
		now, ids, instance, TerminalLive).Scan(&renewed).Error
	if err != nil {
		return nil, fmt.Errorf("models: heartbeat terminals: %w", err)
	}
	live := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		live[id] = true
	}
	lost := map[string]bool{}
	for _, id := range ids {
		if !live[id] {
			lost[id] = true
		}
	}
	return lost, nil
}

// EndTerminal marks a live lease closed (or lost).
func (s *Store) EndTerminal(ctx context.Context, id, state string, at time.Time) error {
	err := s.db.WithContext(ctx).Model(&Terminal{}).Where("id = ? AND state = ?", id, TerminalLive).
		UpdateColumns(map[string]any{"state": state, "closed_at": at}).Error
	if err != nil {
		return fmt.Errorf("models: end terminal %s: %w", id, translate(err))
	}
	return nil
}

// LoseStaleTerminals marks lost every live lease whose holder stopped
// heartbeating before staleBefore: shells do not survive the process that
// ran them, and a lease nobody renews belongs to no running shell. Their
// recordings under way, which lived in that process's memory, failed.
func (s *Store) LoseStaleTerminals(ctx context.Context, staleBefore, at time.Time) (int64, error) {
	var lost int64
	err := s.db.WithContext(ctx).Raw(`WITH lost AS (
			UPDATE terminals SET state = ?, closed_at = ? WHERE state = ? AND heartbeat_at < ? RETURNING id),
		failed AS (
			UPDATE terminal_recordings SET state = ?, ended_at = ? WHERE state = ? AND terminal_id IN (SELECT id FROM lost))
		SELECT count(*) FROM lost`,
		TerminalLost, at, TerminalLive, staleBefore, RecordingFailed, at, RecordingRunning).Scan(&lost).Error
	if err != nil {
		return 0, fmt.Errorf("models: lose old terminals: %w", translate(err))
	}
	return lost, nil
}
