package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTooManyShares: the terminal is shared with as many people as it may be.
var ErrTooManyShares = errors.New("models: the terminal has too many shares")

// TerminalShare is one person's right to watch a terminal.
type TerminalShare struct {
	TerminalID string    `json:"-"`
	UserID     int64     `json:"userId"`
	Username   string    `json:"username" gorm:"->"`
	SharedAt   time.Time `json:"sharedAt"`
}

// ShareTerminal lets userID watch the live terminal id, unless it already
// has max shares (ErrTooManyShares). The terminal's row stays locked until
// the share is written, so two shares at once cannot both take the last
// place. Sharing again with the same person changes nothing. ErrNotFound:
// the terminal is not live.
func (s *Store) ShareTerminal(ctx context.Context, id string, userID int64, max int, at time.Time) error {
	err := s.Tx(ctx, func(tx *Store) error {
		db := tx.db.WithContext(ctx)
		var live []string
		if err := db.Raw(`SELECT id FROM terminals WHERE id = ? AND state = ? FOR NO KEY UPDATE`, id, TerminalLive).Scan(&live).Error; err != nil {
			return err
		}
		if len(live) == 0 {
			return ErrNotFound
		}
		var n int
		if err := db.Raw(`SELECT count(*) FROM terminal_shares WHERE terminal_id = ? AND user_id <> ?`, id, userID).Scan(&n).Error; err != nil {
			return err
		}
		if n >= max {
			return ErrTooManyShares
		}
		return db.Exec(`INSERT INTO terminal_shares (terminal_id, user_id, shared_at) VALUES (?, ?, ?)
			ON CONFLICT (terminal_id, user_id) DO NOTHING`, id, userID, at).Error
	})
	if err != nil {
		return fmt.Errorf("models: share terminal %s with user %d: %w", id, userID, translate(err))
	}
	return nil
}

// UnshareTerminal revokes userID's share of terminal id; it reports whether
// there was one.
func (s *Store) UnshareTerminal(ctx context.Context, id string, userID int64) (bool, error) {
	res := s.db.WithContext(ctx).Exec(`DELETE FROM terminal_shares WHERE terminal_id = ? AND user_id = ?`, id, userID)
	if res.Error != nil {
		return false, fmt.Errorf("models: unshare terminal %s: %w", id, translate(res.Error))
	}
	return res.RowsAffected > 0, nil
}

// TerminalShares lists who may watch terminal id, by name.
func (s *Store) TerminalShares(ctx context.Context, id string) ([]TerminalShare, error) {
	var shares []TerminalShare
	err := s.db.WithContext(ctx).Raw(`SELECT ts.terminal_id, ts.user_id, u.username, ts.shared_at
		FROM terminal_shares ts JOIN users u ON u.id = ts.user_id WHERE ts.terminal_id = ? ORDER BY u.username`, id).
		Scan(&shares).Error
	if err != nil {
		return nil, fmt.Errorf("models: shares of terminal %s: %w", id, translate(err))
	}
	return shares, nil
}

// SharedTerminal is a live terminal shared with someone, and whose it is.
type SharedTerminal struct {
	Terminal
	Owner string // the owner's username
}

// SharedTerminal returns the live terminal id when it is shared with
// userID, or ErrNotFound.
func (s *Store) SharedTerminal(ctx context.Context, id string, userID int64) (*SharedTerminal, error) {
	var ts []SharedTerminal
	err := s.db.WithContext(ctx).Raw(`SELECT t.*, u.username AS owner FROM terminals t
		JOIN terminal_shares ts ON ts.terminal_id = t.id JOIN users u ON u.id = t.user_id
		WHERE t.id = ? AND ts.user_id = ? AND t.state = ?`, id, userID, TerminalLive).Scan(&ts).Error
	if err != nil {
		return nil, fmt.Errorf("models: terminal %s shared with %d: %w", id, userID, translate(err))
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("models: terminal %s shared with %d: %w", id, userID, ErrNotFound)
	}
	return &ts[0], nil
}
