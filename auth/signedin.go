package auth

import (
	"sync"
	"time"

	"atelier/models"
)

// SignInRecheck is how long a sign-in found in the database is believed
// without asking again. A sign-out on this instance takes effect at once;
// one on another instance, or a session row removed by hand, within this.
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
