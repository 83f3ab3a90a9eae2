package models

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"gorm.io/gorm"
)

// usernamePattern mirrors the users_username_format CHECK.
var usernamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,31}$`)

// ValidUsername reports whether name fits the users_username_format CHECK.
func ValidUsername(name string) bool { return usernamePattern.MatchString(name) }

// User is a person who can sign in.
type User struct {
	ID           int64     `json:"id"`
	Username     string    `json:"username"`
	PasswordHash string    `json:"-"`
	IsAdmin      bool      `json:"isAdmin"`
	CreatedAt    time.Time `json:"createdAt"`
	// DisabledAt is when a site admin disabled the account; nil while it
	// may sign in.
	DisabledAt *time.Time `json:"disabledAt,omitempty"`
}

// Disabled reports whether the account may not sign in.
func (u *User) Disabled() bool { return u.DisabledAt != nil }

// BeforeSave mirrors the table's CHECKs so a bad row gets a friendly error.
func (u *User) BeforeSave(*gorm.DB) error {
	if !ValidUsername(u.Username) {
		return fmt.Errorf("%w: username must be 1-32 of a-z 0-9 _ . - and start with a letter or digit", ErrInvalid)
	}
	if u.PasswordHash == "" {
		return fmt.Errorf("%w: user without a password hash", ErrInvalid)
	}
	return nil
}

// CreateUser inserts u; ErrConflict when the username is taken.
func (s *Store) CreateUser(ctx context.Context, u *User) error {
	if err := s.db.WithContext(ctx).Create(u).Error; err != nil {
		return fmt.Errorf("models: create user %q: %w", u.Username, translate(err))
	}
	return nil
}

// CreateUserIfNoneExist inserts u only when the users table is empty, and says
// whether it did. Two servers starting at once create one first admin.
func (s *Store) CreateUserIfNoneExist(ctx context.Context, u *User) (bool, error) {
	created := false
	err := s.Tx(ctx, func(tx *Store) error {
		// The lock makes "empty?" and the insert one step across processes.
		if err := tx.db.Exec("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE").Error; err != nil {
			return err
		}
		var n int64
		if err := tx.db.Model(&User{}).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		created = true
		return tx.db.Create(u).Error
	})
	if err != nil {
		return false, fmt.Errorf("models: first user: %w", translate(err))
	}
	return created, nil
}

// UserByID returns the user or ErrNotFound.
func (s *Store) UserByID(ctx context.Context, id int64) (*User, error) {
	var u User
	if err := s.db.WithContext(ctx).First(&u, id).Error; err != nil {
		return nil, fmt.Errorf("models: user %d: %w", id, translate(err))
	}
	return &u, nil
}

// UserByName returns the user or ErrNotFound.
func (s *Store) UserByName(ctx context.Context, name string) (*User, error) {
	var u User
	err := s.db.WithContext(ctx).Where("username = ?", name).Take(&u).Error
	if err != nil {
		return nil, fmt.Errorf("models: user %q: %w", name, translate(err))
	}
	return &u, nil
}

// Users lists every user by name.
func (s *Store) Users(ctx context.Context) ([]User, error) {
	var us []User
	if err := s.db.WithContext(ctx).Order("username").Find(&us).Error; err != nil {
		return nil, fmt.Errorf("models: users: %w", err)
	}
	return us, nil
}

// LoginSession is a signed-in browser. The cookie holds a token whose SHA-256
// is TokenHash.
type LoginSession struct {
	TokenHash []byte `gorm:"primaryKey"`
	UserID    int64
	CSRFToken string `gorm:"column:csrf_token"`
	CreatedAt time.Time
	ExpiresAt time.Time
}

// CreateLoginSession stores a new session.
func (s *Store) CreateLoginSession(ctx context.Context, ls *LoginSession) error {
	if err := s.db.WithContext(ctx).Create(ls).Error; err != nil {
		return fmt.Errorf("models: create login session: %w", translate(err))
	}
	return nil
}

// LoginSessionUser returns the unexpired session with tokenHash and its user.
func (s *Store) LoginSessionUser(ctx context.Context, tokenHash []byte, now time.Time) (*LoginSession, *User, error) {
	// One round trip: this runs on every request, a terminal's keystrokes
	// included.
	var row struct {
		UserID    int64
		CSRFToken string `gorm:"column:csrf_token"`
		LSCreated time.Time
		ExpiresAt time.Time
		User      User `gorm:"embedded;embeddedPrefix:u_"`
	}
	err := s.db.WithContext(ctx).Table("login_sessions AS ls").
		Select(`ls.user_id, ls.csrf_token, ls.created_at AS ls_created, ls.expires_at,
			u.id AS u_id, u.username AS u_username, u.password_hash AS u_password_hash,
			u.is_admin AS u_is_admin, u.created_at AS u_created_at, u.disabled_at AS u_disabled_at`).
		Joins("JOIN users AS u ON u.id = ls.user_id").
		// A disabled account's sign-ins are deleted as it is disabled; the
		// condition holds should one be written by any other path.
		Where("ls.token_hash = ? AND ls.expires_at > ? AND u.disabled_at IS NULL", tokenHash, now).
		Take(&row).Error
	if err != nil {
		return nil, nil, fmt.Errorf("models: login session: %w", translate(err))
	}
	ls := &LoginSession{TokenHash: tokenHash, UserID: row.UserID, CSRFToken: row.CSRFToken,
		CreatedAt: row.LSCreated, ExpiresAt: row.ExpiresAt}
	return ls, &row.User, nil
}

// DeleteLoginSession removes one session; a missing one is not an error.
func (s *Store) DeleteLoginSession(ctx context.Context, tokenHash []byte) error {
	err := s.db.WithContext(ctx).Where("token_hash = ?", tokenHash).Delete(&LoginSession{}).Error
	if err != nil {
		return fmt.Errorf("models: delete login session: %w", err)
	}
	return nil
}

// DeleteExpiredLoginSessions removes sessions that ended before now.
func (s *Store) DeleteExpiredLoginSessions(ctx context.Context, now time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at <= ?", now).Delete(&LoginSession{})
	if res.Error != nil {
		return 0, fmt.Errorf("models: delete expired login sessions: %w", res.Error)
	}
	return res.RowsAffected, nil
}
