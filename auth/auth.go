// Package auth signs people in and decides what they may do: password
// hashes, DB-backed cookie sessions, CSRF tokens, project roles and the one
// permission table Can(role, action).
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"atelier/fault"
	"atelier/models"
)

var (
	ErrBadCredentials = fault.New(fault.Unauthorized, "bad_credentials", "auth: wrong username or password", "Wrong username or password.")
	ErrSignInRequired = fault.New(fault.Unauthorized, "sign_in_required", "auth: sign in required", "Please sign in.")
	// ErrSiteAdminsOnly answers anyone but a site admin on every /admin
	// URL, signed in or not, as a page that does not exist: nobody else
	// learns what is there.
	ErrSiteAdminsOnly = fault.New(fault.NotFound, "not_found", "auth: site admins only (answered as not found)", "Not found.")
	ErrCSRF           = fault.New(fault.Forbidden, "csrf", "auth: missing or wrong CSRF token", "The form is out of date or was not sent by Atelier; reload the page and try again.")
	ErrCrossOrigin    = fault.New(fault.Forbidden, "cross_origin", "auth: a request from another origin", "The request came from another site; Atelier takes changes only from its own pages.")
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
	// Failed sign-ins per account and client address, per address, and per
	// account (see throttle.go for who each holds back), in signIns.
	pairs, addresses, accounts throttle
	signIns                    *ledger
	signedIn                   signedIn
	// tell carries what this instance forgot to the others (TellPeers);
	// nil tells no one.
	tell func(ctx context.Context, forgotten string)
}

// NewService returns a Service; now is the clock (time.Now in production).
func NewService(store *models.Store, now func() time.Time) (*Service, error) {
	dummy, err := HashPassword(randomToken())
	if err != nil {
		return nil, err
	}
	return &Service{store: store, now: now, dummyHash: dummy,
		hashing:   newHashGate(runtime.NumCPU()),
		pairs:     throttle{scope: scopePair, free: freeAccountFailures},
		addresses: throttle{scope: scopeAddress, free: freeAddressFailures},
		accounts:  throttle{scope: scopeAccount, free: freeAccountFailures},
		signIns:   newLedger(store)}, nil
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
	if err := checkNewPassword(password); err != nil {
		return nil, err
	}
	var hash string
	var err error
	// Only site admins and the first start make users; they queue together.
	if gerr := s.hashing.run(ctx, "", func() { hash, err = HashPassword(password) }); gerr != nil {
		return nil, gerr
	}
	if err != nil {
		return nil, err
	}
	return &models.User{Username: username, PasswordHash: hash, IsAdmin: admin}, nil
}

// Login checks the credentials and starts a session. The returned token goes
// into the cookie; only its hash is stored. addr is the client's address,
// for throttling guessers (empty: the source is unknown, and only the
// account's own record holds the attempt back).
func (s *Service) Login(ctx context.Context, username, password, addr string) (string, *models.LoginSession, *models.User, error) {
	name := strings.TrimSpace(username)
	// A name that cannot exist has no record of its own: it is refused like
	// any unknown name, and the address's record counts it.
	account := ""
	if models.ValidUsername(name) {
		account = name
	}
	try, err := s.admit(ctx, account, clientKey(addr), s.now())
	if err != nil {
		return "", nil, nil, err
	}
	u, err := s.checkPassword(ctx, try.address, name, password)
	now := s.now()
	if serr := s.settle(ctx, try, now, errors.Is(err, ErrBadCredentials), err == nil); serr != nil {
		return "", nil, nil, serr
	}
	if err != nil {
		return "", nil, nil, err
	}
	// Told only to whoever knows the password: anyone else learns nothing
	// of the account from the refusal.
	if u.Disabled() {
		return "", nil, nil, ErrDisabled
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

// attempt is a sign-in admitted by the throttles: the keys of its records.
type attempt struct {
	account, address, pair string
	// heldByAccount says the account's record admitted it, because the
	// address failed lately or has another sign-in being checked.
	heldByAccount bool
}

// keys are the names of the attempt's records.
func (a attempt) keys(s *Service) []models.SignInKey {
	var keys []models.SignInKey
	for _, k := range []struct {
		t   throttle
		key string
	}{{s.addresses, a.address}, {s.pairs, a.pair}, {s.accounts, a.account}} {
		if k.key != "" {
			keys = append(keys, models.SignInKey{Scope: k.t.scope, Key: k.key})
		}
	}
	return keys
}

// admit starts an attempt on the throttles or says how long to wait. The
// account's record is asked only for an address that failed lately: one
// with a clean record passes it, so failures from elsewhere never lock the
// rightful person out. A client still within a wait this instance has seen
// is refused without the database.
func (s *Service) admit(ctx context.Context, account, address string, now time.Time) (attempt, error) {
	a := attempt{account: account, address: address}
	if account != "" && address != "" {
		// No username holds a space, so the pair's parts stay apart.
		a.pair = account + " " + address
	}
	// Either record holding the client back means the address failed
	// lately (a pair's failures are its address's too), so the account's
	// wait is the client's as well.
	if wait := max(s.signIns.waitSeen(s.addresses, address, now), s.signIns.waitSeen(s.pairs, a.pair, now)); wait > 0 {
		return a, &TooManyAttemptsError{Wait: max(wait, s.signIns.waitSeen(s.accounts, account, now))}
	}
	var refused error
	err := s.signIns.change(ctx, now, a.keys(s), func(rs records) {
		addr, pair, acct := rs.of(s.addresses, address), rs.of(s.pairs, a.pair), rs.of(s.accounts, account)
		wait, ok, seen := s.addresses.begin(addr, now)
		if !ok {
			refused = s.refusal(rs, a, seen, wait, now)
			return
		}
		if wait, ok, _ := s.pairs.begin(pair, now); !ok {
			s.addresses.end(addr, now, false, false)
			refused = s.refusal(rs, a, seen, wait, now)
			return
		}
		if seen {
			if wait, ok, _ := s.accounts.begin(acct, now); !ok {
				s.pairs.end(pair, now, false, false)
				s.addresses.end(addr, now, false, false)
				refused = s.refusal(rs, a, seen, wait, now)
				return
			}
			a.heldByAccount = true
		}
	})
	if err != nil {
		return a, err
	}
	return a, refused
}

// refusal says to wait until every record that holds the attempt back lets
// it through, not only the first that refused, so a client that waits as
// told is not refused again.
func (s *Service) refusal(rs records, a attempt, seen bool, wait time.Duration, now time.Time) error {
	wait = max(wait, s.addresses.waitFor(rs.of(s.addresses, a.address), now), s.pairs.waitFor(rs.of(s.pairs, a.pair), now))
	if seen {
		wait = max(wait, s.accounts.waitFor(rs.of(s.accounts, a.account), now))
	}
	return &TooManyAttemptsError{Wait: wait}
}

// settle records how an admitted attempt went. A success clears the record
// of its account and address only: it says nothing of the guesses from
// elsewhere, and an address is forgotten only with time. It is recorded
// even when the request has gone, so giving up on a request does not
// erase its failure.
func (s *Service) settle(ctx context.Context, a attempt, now time.Time, failed, succeeded bool) error {
	return s.signIns.change(context.WithoutCancel(ctx), now, a.keys(s), func(rs records) {
		s.addresses.end(rs.of(s.addresses, a.address), now, failed, false)
		s.pairs.end(rs.of(s.pairs, a.pair), now, failed, succeeded)
		acct := rs.of(s.accounts, a.account)
		switch {
		case a.heldByAccount:
			s.accounts.end(acct, now, failed, false)
		case failed:
			s.accounts.fail(acct, now)
		}
	})
}

// checkPassword returns the user whose name and password these are, or
// ErrBadCredentials. An unknown name is checked against a dummy hash, so
// it takes as long as a known name with a wrong password. It waits for a
// hashing slot in the queue of the caller's address.
func (s *Service) checkPassword(ctx context.Context, address, name, password string) (*models.User, error) {
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
	if err := s.hashing.run(ctx, address, func() { ok, verr = VerifyPassword(hash, password) }); err != nil {
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
	s.tellPeers(ctx, forgetSignIn+hex.EncodeToString(hash))
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
