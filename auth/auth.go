// Package auth signs people in and decides what they may do: password
// hashes, DB-backed cookie sessions, CSRF tokens, project roles and the one
// permission table Can(role, action).
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"

	"atelier/fault"
	"atelier/models"
)

var (
	ErrBadCredentials = fault.New(fault.Unauthorized, "bad_credentials", "auth: wrong username or password", "Wrong username or password.")
	ErrSignInRequired = fault.New(fault.Unauthorized, "sign_in_required", "auth: sign in required", "Please sign in.")
	ErrNotSiteAdmin   = fault.New(fault.Forbidden, "site_admin_only", "auth: site admins only", "Only site admins can do that.")
	// ErrSiteAdminsOnly answers anyone but a site admin on the dashboard's
	// URLs, signed in or not, as a page that does not exist: nobody else
	// learns what is there.
	ErrSiteAdminsOnly = fault.New(fault.NotFound, "not_found", "auth: site admins only (answered as not found)", "Not found.")
	ErrCSRF           = fault.New(fault.Forbidden, "csrf", "auth: missing or wrong CSRF token", "The form is out of date or was not sent by Atelier; reload the page and try again.")
	ErrBadUsername    = fault.New(fault.BadInput, "bad_username", "auth: a username is 1-32 of a-z 0-9 _ . - and starts with a letter or digit", "A username is 1-32 of a-z 0-9 _ . - and starts with a letter or digit.")
	ErrWeakPassword   = fault.New(fault.BadInput, "weak_password", fmt.Sprintf("auth: a password has at least %d characters", MinPasswordLength), fmt.Sprintf("A password has at least %d characters.", MinPasswordLength))
	ErrUserExists     = fault.New(fault.Conflict, "user_exists", "auth: that username is taken", "That username is taken.")
)

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 14 * 24 * time.Hour

// Service signs people in and manages users.
type Service struct {
	store *models.Store
	now   func() time.Time
	// dummyHash is verified when a username does not exist, so that a wrong
	// name costs as much time as a wrong password and names do not leak.
	dummyHash string
	hashing   *hashGate
	// Failed sign-ins per username and per client address.
	accounts, addresses *throttle
	signedIn            signedIn
}

// NewService returns a Service; now is the clock (time.Now in production).
func NewService(store *models.Store, now func() time.Time) (*Service, error) {
	dummy, err := HashPassword(randomToken())
	if err != nil {
		return nil, err
	}
	return &Service{store: store, now: now, dummyHash: dummy,
		hashing:  newHashGate(runtime.NumCPU()),
		accounts: newThrottle(freeAccountFailures), addresses: newThrottle(freeAddressFailures)}, nil
}

// CreateUser adds a person who can sign in.
func (s *Service) CreateUser(ctx context.Context, username, password string, admin bool) (*models.User, error) {
	u, err := s.newUser(ctx, username, password, admin)
	if err != nil {
		return nil, err
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		if errors.Is(err, models.ErrConflict) {
			return nil, ErrUserExists
		}
		return nil, err
	}
	return u, nil
}

// EnsureFirstAdmin creates the site admin `admin` when there are no users yet.
// An empty password is replaced by a generated one. It returns the password
// only when it created the user, so the caller can show it once.
func (s *Service) EnsureFirstAdmin(ctx context.Context, password string) (created bool, usedPassword string, err error) {
	if password == "" {
		password = randomToken()[:20]
	}
	u, err := s.newUser(ctx, "admin", password, true)
	if err != nil {
		return false, "", fmt.Errorf("auth: ATELIER_ADMIN_PASSWORD: %w", err)
	}
	created, err = s.store.CreateUserIfNoneExist(ctx, u)
	if err != nil || !created {
		return false, "", err
	}
	return true, password, nil
}

func (s *Service) newUser(ctx context.Context, username, password string, admin bool) (*models.User, error) {
	if !models.ValidUsername(username) {
		return nil, ErrBadUsername
	}
	if utf8.RuneCountInString(password) < MinPasswordLength || len(password) > maxPasswordLength {
		return nil, ErrWeakPassword
	}
	var hash string
	var err error
	if gerr := s.hashing.run(ctx, func() { hash, err = HashPassword(password) }); gerr != nil {
		return nil, gerr
	}
	if err != nil {
		return nil, err
	}
	return &models.User{Username: username, PasswordHash: hash, IsAdmin: admin}, nil
}

// Login checks the credentials and starts a session. The returned token goes
// into the cookie; only its hash is stored. addr is the client's address,
// for throttling guessers (empty skips that throttle).
func (s *Service) Login(ctx context.Context, username, password, addr string) (string, *models.LoginSession, *models.User, error) {
	name := strings.TrimSpace(username)
	// A name that cannot exist has no record of its own: it is refused like
	// any unknown name, and the address's record counts it.
	account := ""
	if models.ValidUsername(name) {
		account = name
	}
	if err := s.admit(account, addr, s.now()); err != nil {
		return "", nil, nil, err
	}
	u, err := s.checkPassword(ctx, name, password)
	now := s.now()
	failed := errors.Is(err, ErrBadCredentials)
	s.accounts.end(account, now, failed, err == nil)
	s.addresses.end(addr, now, failed, false)
	if err != nil {
		return "", nil, nil, err
	}
	token := randomToken()
	ls := &models.LoginSession{
		TokenHash: hashToken(token),
		UserID:    u.ID,
		CSRFToken: randomToken(),
		CreatedAt: now,
		ExpiresAt: now.Add(SessionTTL),
	}
	if err := s.store.CreateLoginSession(ctx, ls); err != nil {
		return "", nil, nil, err
	}
	return token, ls, u, nil
}

// admit starts an attempt on both throttles or says how long to wait.
func (s *Service) admit(account, addr string, now time.Time) error {
	wait, ok := s.accounts.begin(account, now)
	if !ok {
		return &TooManyAttemptsError{Wait: wait}
	}
	if wait, ok := s.addresses.begin(addr, now); !ok {
		s.accounts.end(account, now, false, false)
		return &TooManyAttemptsError{Wait: wait}
	}
	return nil
}

// checkPassword returns the user whose name and password these are, or
// ErrBadCredentials. An unknown name is checked against a dummy hash, so
// it takes as long as a known name with a wrong password.
func (s *Service) checkPassword(ctx context.Context, name, password string) (*models.User, error) {
	if len(password) > maxPasswordLength {
		return nil, ErrBadCredentials
	}
	u, err := s.store.UserByName(ctx, name)
	hash := s.dummyHash
	switch {
	case err == nil:
		hash = u.PasswordHash
	case !errors.Is(err, models.ErrNotFound):
		return nil, err
	}
	var ok bool
	var verr error
	if err := s.hashing.run(ctx, func() { ok, verr = VerifyPassword(hash, password) }); err != nil {
		return nil, err
	}
	if u != nil && verr != nil {
		return nil, fmt.Errorf("auth: user %q: %w", u.Username, verr)
	}
	if u == nil || !ok {
		return nil, ErrBadCredentials
	}
	return u, nil
}

// Resolve returns the live session for a cookie token and its user, or
// ErrSignInRequired.
func (s *Service) Resolve(ctx context.Context, token string) (*models.LoginSession, *models.User, error) {
	if token == "" {
		return nil, nil, ErrSignInRequired
	}
	hash, now := hashToken(token), s.now()
	if ls, u, ok := s.signedIn.get(hash, now); ok {
		return ls, u, nil
	}
	ls, u, err := s.store.LoginSessionUser(ctx, hash, now)
	if errors.Is(err, models.ErrNotFound) {
		s.signedIn.forget(hash)
		return nil, nil, ErrSignInRequired
	}
	if err != nil {
		return nil, nil, err
	}
	s.signedIn.put(hash, ls, u, now)
	return ls, u, nil
}

// Logout ends the session of token.
func (s *Service) Logout(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	// Forgotten after the row is gone, so a request racing the sign-out
	// cannot put it back.
	hash := hashToken(token)
	err := s.store.DeleteLoginSession(ctx, hash)
	s.signedIn.forget(hash)
	return err
}

func hashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// randomToken returns 256 random bits, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}
