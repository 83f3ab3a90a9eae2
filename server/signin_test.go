package server

import (
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// anonymousFrom is a browser that connects from ip, one of the loopback
// addresses, so the server sees it as another client.
func (h *harness) anonymousFrom(ip string) *client {
	jar, _ := cookiejar.New(nil)
	c := &client{h: h, http: &http.Client{
		Jar:           jar,
		Transport:     &http.Transport{DialContext: dialerFrom(ip).DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	h.t.Cleanup(c.http.CloseIdleConnections)
	c.loadCSRF("/login")
	return c
}

// retryAfter is the wait a 429 asks for.
func retryAfter(t *testing.T, res *http.Response) time.Duration {
	t.Helper()
	secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if res.StatusCode != http.StatusTooManyRequests || err != nil || secs <= 0 {
		t.Fatalf("want 429 with Retry-After, got %d %q: %s", res.StatusCode, res.Header.Get("Retry-After"), readBody(res))
	}
	return time.Duration(secs) * time.Second
}

// A lockout attempt on the site admin: one address sends a wrong password
// each time its wait ends, the whole siege long. The admin signs in from
// another address at every step, at once; the besieging address waits,
// even with the right password. The addresses are the connections' own.
func TestLockoutAttemptFromOneAddress(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "boss", "password-boss", true); err != nil {
		t.Fatal(err)
	}
	attacker := h.anonymousFrom("127.0.0.2")
	guess := func(password string) *http.Response {
		return attacker.post("/login", url.Values{"username": {"boss"}, "password": {password}}, jsonAccept)
	}
	ownerSignsIn := func(when string) {
		t.Helper()
		owner := h.anonymousFrom("127.0.0.3")
		res := owner.post("/login", url.Values{"username": {"boss"}, "password": {"password-boss"}})
		if res.StatusCode != http.StatusSeeOther || findCookie(res, "atelier_session") == nil {
			t.Fatalf("the admin from another address %s: %d %s", when, res.StatusCode, readBody(res))
		}
		owner.loadCSRF("/projects")
		if res := owner.get("/admin", nil); res.StatusCode != http.StatusOK {
			t.Fatalf("the admin's dashboard %s: %d", when, res.StatusCode)
		}
	}
	for range 5 {
		expectProblem(t, guess("wrong"), http.StatusUnauthorized, "bad_credentials")
	}
	wait := retryAfter(t, guess("wrong"))
	ownerSignsIn("during the first wait")
	var longest time.Duration
	for round := range 25 {
		h.clock.Advance(wait)
		expectProblem(t, guess(fmt.Sprintf("wrong-%d", round)), http.StatusUnauthorized, "bad_credentials")
		wait = retryAfter(t, guess("wrong"))
		longest = max(longest, wait)
		ownerSignsIn(fmt.Sprintf("in round %d of the siege (wait %s)", round, wait))
	}
	if longest != 15*time.Minute {
		t.Fatalf("the longest wait of the siege %s, want the 15 min ceiling", longest)
	}
	// The besieging address itself waits, whatever it sends.
	retryAfter(t, guess("password-boss"))
}

// A guesser with many addresses (behind the operator's proxy, which says
// who the client is) gets one try from each; their next tries share the
// account's wait, while the owner, from an address that has not failed,
// signs in.
func TestGuesserWithManyAddressesIsBounded(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	if _, err := h.app.Auth.CreateUser(t.Context(), "boss", "password-boss", true); err != nil {
		t.Fatal(err)
	}
	c := h.anonymous()
	from := func(addr, password string) *http.Response {
		return c.post("/login", url.Values{"username": {"boss"}, "password": {password}},
			header{"Accept": "application/json", "X-Forwarded-For": addr})
	}
	for i := range 30 {
		expectProblem(t, from(fmt.Sprintf("198.51.100.%d", i), "wrong"), http.StatusUnauthorized, "bad_credentials")
	}
	for i := range 30 {
		if w := retryAfter(t, from(fmt.Sprintf("198.51.100.%d", i), "wrong")); w != 15*time.Minute {
			t.Fatalf("a second try from address %d waits %s, want the account's 15 min", i, w)
		}
	}
	res := from("192.0.2.7", "password-boss")
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the owner from an address that has not failed: %d %s", res.StatusCode, readBody(res))
	}
}
