package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The verifiers' queue is the changes' rows themselves: a Change to verify
// has check_due, the time its next attempt may begin; an instance claims
// the check for a while (claimed_by, claimed_until), renews the claim while
// the check runs, and settles it when the check ends. A claim that expired
// (its instance stopped, or stalled) is anyone's, and the claim's end
// checks that the claim is still the instance's own, so a check taken over
// is recorded by the one that took it, once.

// ErrClaimLost: the instance no longer holds the claim on the Change's
// check (it expired and another took it, or the Change left the queue).
var ErrClaimLost = errors.New("models: the claim on the change's check is no longer held")

// CheckClaim is a Change's check claimed by an instance.
type CheckClaim struct {
	ChangeID int64
	// Attempts counts this one.
	Attempts int
	// Before is the instance whose expired claim this one replaced; ""
	// when the check was not claimed.
	Before string
}

// ClaimCheck claims the oldest due check that nobody holds (or whose claim
// expired by now) for instance until now+hold, or returns ErrNotFound when
// none is due. Rows another claim is taking right now are skipped, not
// waited for: two instances polling at once take two different checks.
func (s *Store) ClaimCheck(ctx context.Context, instance string, now time.Time, hold time.Duration) (*CheckClaim, error) {
	var rows []struct {
		ID            int64
		CheckAttempts int
		Before        *string
	}
	err := s.db.WithContext(ctx).Raw(`
		WITH due AS (
			SELECT id, claimed_by FROM changes
			WHERE check_due <= ? AND (claimed_until IS NULL OR claimed_until <= ?)
			ORDER BY check_due, id
			LIMIT 1
			FOR UPDATE SKIP LOCKED)
		UPDATE changes c SET claimed_by = ?, claimed_until = ?, check_attempts = c.check_attempts + 1
		FROM due WHERE c.id = due.id
		RETURNING c.id, c.check_attempts, due.claimed_by AS before`,
		now, now, instance, now.Add(hold)).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("models: claim a check: %w", translate(err))
	}
	if len(rows) == 0 {
		return nil, ErrNotFound
	}
	c := &CheckClaim{ChangeID: rows[0].ID, Attempts: rows[0].CheckAttempts}
	if rows[0].Before != nil {
		c.Before = *rows[0].Before
	}
	return c, nil
}

// RenewCheck extends instance's claim on the change's check to until, or
// returns ErrClaimLost.
func (s *Store) RenewCheck(ctx context.Context, id int64, instance string, until time.Time) error {
	return s.settleClaim(ctx, id, instance, "renew", map[string]any{"claimed_until": until})
}

// ReleaseCheck lets go of instance's claim on the change's check, which is
// tried again from due; ErrClaimLost when the claim was not held.
func (s *Store) ReleaseCheck(ctx context.Context, id int64, instance string, due time.Time) error {
	return s.settleClaim(ctx, id, instance, "release",
		map[string]any{"claimed_by": nil, "claimed_until": nil, "check_due": due})
}

// FinishCheck takes the change out of the queue, in the transaction that
// records what its check found, when instance still holds the claim; else
// ErrClaimLost, and the caller records nothing. The row stays locked to
// the end of the transaction.
func (s *Store) FinishCheck(ctx context.Context, id int64, instance string) error {
	return s.settleClaim(ctx, id, instance, "finish",
		map[string]any{"claimed_by": nil, "claimed_until": nil, "check_due": nil})
}

func (s *Store) settleClaim(ctx context.Context, id int64, instance, what string, cols map[string]any) error {
	res := s.db.WithContext(ctx).Table("changes").Where("id = ? AND claimed_by = ?", id, instance).UpdateColumns(cols)
	if res.Error != nil {
		return fmt.Errorf("models: %s the check of change %d: %w", what, id, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: %s the check of change %d: %w", what, id, ErrClaimLost)
	}
	return nil
}
