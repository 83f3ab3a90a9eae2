package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm/clause"
)

// LockSiteAdmins locks the rows of the site admins who may sign in, in id
// order, and returns their ids. A change that could leave no such admin
// holds them until it commits, so two of them at once cannot each find
// another admin left.
func (s *Store) LockSiteAdmins(ctx context.Context) ([]int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Raw(`SELECT id FROM users WHERE is_admin AND disabled_at IS NULL ORDER BY id FOR UPDATE`).
		Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("models: lock site admins: %w", translate(err))
	}
	return ids, nil
}

// LockUserByName returns the user, its row locked, or ErrNotFound.
func (s *Store) LockUserByName(ctx context.Context, name string) (*User, error) {
	var u User
	err := s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Where("username = ?", name).Take(&u).Error
	if err != nil {
		return nil, fmt.Errorf("models: lock user %q: %w", name, translate(err))
	}
	return &u, nil
}

// SetUserPassword stores a new password hash for the user.
func (s *Store) SetUserPassword(ctx context.Context, userID int64, hash string) error {
	return s.updateUser(ctx, userID, "password_hash", hash)
}

// SetUserDisabled disables the user at `at`, or enables them when at is nil.
func (s *Store) SetUserDisabled(ctx context.Context, userID int64, at *time.Time) error {
	return s.updateUser(ctx, userID, "disabled_at", at)
}

// SetSiteAdmin grants or removes the site admin role.
func (s *Store) SetSiteAdmin(ctx context.Context, userID int64, admin bool) error {
	return s.updateUser(ctx, userID, "is_admin", admin)
}

func (s *Store) updateUser(ctx context.Context, userID int64, column string, value any) error {
	res := s.db.WithContext(ctx).Model(&User{}).Where("id = ?", userID).UpdateColumn(column, value)
	if res.Error != nil {
		return fmt.Errorf("models: user %d: set %s: %w", userID, column, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: user %d: %w", userID, ErrNotFound)
	}
	return nil
}

// DeleteLoginSessionsOf ends every sign-in of the user but the one whose
// token hash is keep (nil keeps none), and returns how many it ended.
func (s *Store) DeleteLoginSessionsOf(ctx context.Context, userID int64, keep []byte) (int64, error) {
	q := s.db.WithContext(ctx).Where("user_id = ?", userID)
	if keep != nil {
		q = q.Where("token_hash <> ?", keep)
	}
	res := q.Delete(&LoginSession{})
	if res.Error != nil {
		return 0, fmt.Errorf("models: sign-ins of user %d: %w", userID, translate(res.Error))
	}
	return res.RowsAffected, nil
}

// PasswordReset is a link that lets its person set a new password once.
// The link holds a token whose SHA-256 is TokenHash.
type PasswordReset struct {
	TokenHash []byte `gorm:"primaryKey"`
	UserID    int64
	CreatedBy *int64
	CreatedAt time.Time
	ExpiresAt time.Time
}

// PutPasswordReset stores r in place of any link its person had.
func (s *Store) PutPasswordReset(ctx context.Context, r *PasswordReset) error {
	return s.Tx(ctx, func(tx *Store) error {
		if err := tx.DeletePasswordResetsOf(ctx, r.UserID); err != nil {
			return err
		}
		if err := tx.db.Create(r).Error; err != nil {
			return fmt.Errorf("models: password reset of user %d: %w", r.UserID, translate(err))
		}
		return nil
	})
}

// PasswordResetUser returns the person of the link whose token hash this
// is, while it is unexpired at now and its person not disabled; else
// ErrNotFound. It does not use the link.
func (s *Store) PasswordResetUser(ctx context.Context, tokenHash []byte, now time.Time) (*User, error) {
	var u User
	err := s.db.WithContext(ctx).Table("users AS u").Select("u.*").
		Joins("JOIN password_resets AS r ON r.user_id = u.id").
		Where("r.token_hash = ? AND r.expires_at > ? AND u.disabled_at IS NULL", tokenHash, now).
		Take(&u).Error
	if err != nil {
		return nil, fmt.Errorf("models: password reset: %w", translate(err))
	}
	return &u, nil
}

// TakePasswordReset uses the link: it deletes it and returns its person's
// id, if it was unexpired at now; else ErrNotFound. Of two requests with
// the same link, one takes it.
func (s *Store) TakePasswordReset(ctx context.Context, tokenHash []byte, now time.Time) (int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Raw(`DELETE FROM password_resets WHERE token_hash = ? AND expires_at > ? RETURNING user_id`,
		tokenHash, now).Scan(&ids).Error
	if err != nil {
		return 0, fmt.Errorf("models: take password reset: %w", translate(err))
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("models: take password reset: %w", ErrNotFound)
	}
	return ids[0], nil
}

// DeletePasswordResetsOf drops the user's link, if any.
func (s *Store) DeletePasswordResetsOf(ctx context.Context, userID int64) error {
	if err := s.db.WithContext(ctx).Where("user_id = ?", userID).Delete(&PasswordReset{}).Error; err != nil {
		return fmt.Errorf("models: password resets of user %d: %w", userID, translate(err))
	}
	return nil
}

// DeleteExpiredPasswordResets removes links that expired before now.
func (s *Store) DeleteExpiredPasswordResets(ctx context.Context, now time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at <= ?", now).Delete(&PasswordReset{})
	if res.Error != nil {
		return 0, fmt.Errorf("models: delete expired password resets: %w", res.Error)
	}
	return res.RowsAffected, nil
}
