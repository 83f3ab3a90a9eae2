package auth

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"atelier/models"
)

// SignInRecheck is how long a sign-in found in the database is believed
// without asking again. A sign-out, a password's change or reset and a
// disabled account on this instance take effect at once, and on the other
// instances as soon as they hear of it (TellPeers); a session row removed
// by hand, or one whose news was lost, within this.
const SignInRecheck = 2 * time.Second

// signedInMax bounds the remembered sign-ins; past it they are all
// forgotten, which costs one query each on their next request.
const signedInMax = 100_000

// signedIn remembers the sign-ins resolved recently, so a request with a
// cookie (every keystroke of a terminal) costs a map lookup rather than a
// query.
type signedIn struct {
	mu      sync.Mutex
	entries map[string]signedInEntry // by token hash
}

type signedInEntry struct {
	ls      models.LoginSession
	user    models.User
	checked time.Time
}

// get answers copies of a sign-in checked less than SignInRecheck before
// now and not yet expired.
func (c *signedIn) get(hash []byte, now time.Time) (*models.LoginSession, *models.User, bool) {
	c.mu.Lock()
	e, ok := c.entries[string(hash)]
	c.mu.Unlock()
	if !ok || now.Sub(e.checked) >= SignInRecheck || now.Sub(e.checked) < 0 || !now.Before(e.ls.ExpiresAt) {
		return nil, nil, false
	}
	return &e.ls, &e.user, true
}

func (c *signedIn) put(hash []byte, ls *models.LoginSession, u *models.User, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= signedInMax {
		c.entries = make(map[string]signedInEntry)
	}
	c.entries[string(hash)] = signedInEntry{ls: *ls, user: *u, checked: now}
}

func (c *signedIn) forget(hash []byte) {
	c.mu.Lock()
	delete(c.entries, string(hash))
	c.mu.Unlock()
}

// forgetUser forgets every sign-in of the user, whose account or password
// changed: the next request of each reads its row (or finds it gone).
func (c *signedIn) forgetUser(userID int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.user.ID == userID {
			delete(c.entries, k)
		}
	}
}

// What one instance tells the others it forgot: a sign-in by its token's
// hash, or every sign-in of a person.
const (
	forgetSignIn = "signin "
	forgetUser   = "user "
)

// TellPeers makes every sign-in this Service ends, and every person whose
// sign-ins it forgets, known to tell: the server hands each to the other
// instances, whose Forget stops believing it at once. Called before the
// Service serves.
func (s *Service) TellPeers(tell func(ctx context.Context, forgotten string)) { s.tell = tell }

func (s *Service) tellPeers(ctx context.Context, forgotten string) {
	if s.tell != nil {
		s.tell(ctx, forgotten)
	}
}

// forgetUser forgets the person's sign-ins here and tells the others.
func (s *Service) forgetUser(ctx context.Context, userID int64) {
	s.signedIn.forgetUser(userID)
	s.tellPeers(ctx, forgetUser+strconv.FormatInt(userID, 10))
}

// Forget acts on what another instance told through TellPeers; anything
// else is ignored (the next check of SignInRecheck still comes).
func (s *Service) Forget(forgotten string) {
	if h, ok := strings.CutPrefix(forgotten, forgetSignIn); ok {
		if hash, err := hex.DecodeString(h); err == nil {
			s.signedIn.forget(hash)
		}
	} else if id, ok := strings.CutPrefix(forgotten, forgetUser); ok {
		if userID, err := strconv.ParseInt(id, 10, 64); err == nil {
			s.signedIn.forgetUser(userID)
		}
	}
}

// ForgetAll forgets every sign-in, for when news of some may have been
// lost: each costs one query on its next request.
func (s *Service) ForgetAll() {
	s.signedIn.mu.Lock()
	s.signedIn.entries = nil
	s.signedIn.mu.Unlock()
}
