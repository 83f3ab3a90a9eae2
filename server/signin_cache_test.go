package server

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"testing"

	"atelier/auth"
)

// TestSignedInRequestsSkipTheDatabase: a keystroke with a signed-in cookie
// costs no query while its sign-in was checked within auth.SignInRecheck;
// a sign-in removed behind this instance's back (a sign-out on another
// instance) is refused once that bound has passed, and a sign-out here at
// once, even for a copy of the cookie in an attacker's hands.
func TestSignedInRequestsSkipTheDatabase(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open a terminal: %d %s", res.StatusCode, readBody(res))
	}
	seq := uint64(0)
	key := func(c *client) *http.Response {
		seq++
		return c.input(base, term.ID, seq, "x")
	}
	if res := owner.get(base+"/terminals", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("list terminals: %d", res.StatusCode)
	}

	const keys = 100
	sql := h.statements.RequestSQL()
	for i := range keys {
		if res := key(owner); res.StatusCode != http.StatusOK {
			t.Fatalf("key %d: %d %s", i, res.StatusCode, readBody(res))
		} else {
			res.Body.Close()
		}
	}
	if n := h.statements.RequestSQL() - sql; n > 1 {
		t.Errorf("%d keystrokes within %s cost %d queries, want at most 1", keys, auth.SignInRecheck, n)
	}

	// Another instance signs the owner out: only the row goes.
	u, _ := url.Parse(h.srv.URL)
	var cookie string
	for _, ck := range owner.http.Jar.Cookies(u) {
		if ck.Name == "atelier_session" {
			cookie = ck.Value
		}
	}
	sum := sha256.Sum256([]byte(cookie))
	if err := h.store.DeleteLoginSession(t.Context(), sum[:]); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(auth.SignInRecheck)
	expectProblem(t, owner.get(base+"/terminals", jsonAccept), http.StatusUnauthorized, "sign_in_required")

	// A sign-out here: the stolen copy of a cookie that was just used is
	// refused on its next request.
	thief := h.user("thief-target", false)
	thief.loadCSRF("/projects")
	stolen := h.anonymous()
	stolen.http.Jar.SetCookies(u, thief.http.Jar.Cookies(u))
	if res := stolen.get("/projects", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("the copied cookie before sign-out: %d", res.StatusCode)
	}
	if res := thief.post("/logout", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", res.StatusCode)
	}
	expectProblem(t, stolen.get("/projects", jsonAccept), http.StatusUnauthorized, "sign_in_required")
}
