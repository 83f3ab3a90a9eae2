package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/models"
	"atelier/testrig/wait"
)

// signInWith signs name in with password as a new browser, or fails the
// test.
func (h *harness) signInWith(name, password string) *client {
	h.t.Helper()
	c := h.anonymous()
	res := c.post("/login", url.Values{"username": {name}, "password": {password}})
	if res.StatusCode != http.StatusSeeOther {
		h.t.Fatalf("sign in as %s: %d %s", name, res.StatusCode, readBody(res))
	}
	c.loadCSRF("/projects")
	return c
}

// signedIn reports whether c's sign-in still stands.
func (c *client) signedIn() bool {
	c.h.t.Helper()
	res := c.get("/projects", jsonAccept)
	readBody(res)
	switch res.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusUnauthorized:
		return false
	}
	c.h.t.Fatalf("GET /projects: %d", res.StatusCode)
	return false
}

// signInStatus is what a sign-in as name with password is answered.
func (h *harness) signInStatus(name, password string) (int, string) {
	h.t.Helper()
	res := h.anonymous().post("/login", url.Values{"username": {name}, "password": {password}}, jsonAccept)
	body := readBody(res)
	if res.StatusCode == http.StatusSeeOther {
		return res.StatusCode, ""
	}
	return res.StatusCode, body
}

// feedText is the dashboard's feed as a site admin reads it.
func feedText(c *client) string { return c.fragment("/admin?part=feed").Find("ol.feed").Text() }

// Changing one's password ends every other sign-in of one's own, at once,
// and keeps the one that changed it; the old password no longer works.
func TestPasswordChangeEndsOtherSignIns(t *testing.T) {
	h := newHarness(t)
	root := h.user("root", true)
	alice := h.user("alice", false)
	laptop := h.signInWith("alice", "password-alice")
	bob := h.user("bob", false)

	// The top bar leads to the page.
	if href := alice.page("/projects").Find("header.top a.who").AttrOr("href", ""); href != "/account" {
		t.Fatalf("the top bar's link to the account is %q", href)
	}
	form := alice.page("/account").Find("form#change-password")
	if form.AttrOr("action", "") != "/account/password" || form.Find(`input[name="password"]`).Length() != 1 {
		t.Fatalf("the account page has no form to change the password")
	}

	res := alice.post("/account/password", url.Values{"password": {"password-alice"},
		"new_password": {"a-new-secret"}, "confirm": {"a-new-secret"}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/account?changed=1" {
		t.Fatalf("change: %d %q %s", res.StatusCode, res.Header.Get("Location"), readBody(res))
	}
	if !alice.signedIn() {
		t.Fatal("the sign-in that changed the password was ended")
	}
	if laptop.signedIn() {
		t.Fatal("alice's other sign-in survived the change of her password")
	}
	if !bob.signedIn() {
		t.Fatal("someone else's sign-in was ended")
	}
	if notice := alice.page("/account?changed=1").Find(".notice").Text(); !strings.Contains(notice, "signed out") {
		t.Errorf("the page after the change says %q", notice)
	}
	if st, _ := h.signInStatus("alice", "password-alice"); st != http.StatusUnauthorized {
		t.Errorf("the old password signs in: %d", st)
	}
	h.signInWith("alice", "a-new-secret")

	// The rules of a new user's password, and a repetition that differs.
	expectProblem(t, alice.post("/account/password", url.Values{"password": {"a-new-secret"}, "new_password": {"short"}}, jsonAccept),
		http.StatusBadRequest, "weak_password")
	expectProblem(t, alice.post("/account/password", url.Values{"password": {"a-new-secret"},
		"new_password": {"long-enough-1"}, "confirm": {"long-enough-2"}}, jsonAccept), http.StatusBadRequest, "passwords_differ")

	if feed := feedText(root); !strings.Contains(feed, "alice changed their password") {
		t.Errorf("the feed does not say it: %q", feed)
	}
}

// A wrong current password is refused, changes nothing, and is held back
// as a wrong password at sign-in is: past the free failures the address
// waits, whatever it sends, while the person signs in from elsewhere.
func TestWrongOldPasswordIsRefusedAndThrottled(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "alice", "password-alice", false); err != nil {
		t.Fatal(err)
	}
	thief := h.anonymousFrom("127.0.0.2")
	if res := thief.post("/login", url.Values{"username": {"alice"}, "password": {"password-alice"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", res.StatusCode)
	}
	thief.loadCSRF("/projects")
	change := func(old string, hdr header) *http.Response {
		return thief.post("/account/password", url.Values{"password": {old}, "new_password": {"taken-over-1"}, "confirm": {"taken-over-1"}}, hdr)
	}
	page := change("guess-0", nil)
	if body := readBody(page); page.StatusCode != http.StatusForbidden || !strings.Contains(body, "The current password is wrong.") {
		t.Fatalf("a wrong current password in the form: %d %.300s", page.StatusCode, body)
	}
	for i := 1; i < 5; i++ {
		expectProblem(t, change("guess", jsonAccept), http.StatusForbidden, "wrong_password")
	}
	wait := retryAfter(t, change("guess", jsonAccept))
	// Held back even with the right password, as at sign-in.
	retryAfter(t, change("password-alice", jsonAccept))
	// The person, elsewhere, is not held back, and the password is hers.
	if st, body := h.signInStatus("alice", "password-alice"); st != http.StatusSeeOther {
		t.Fatalf("alice from another address: %d %s", st, body)
	}
	// Wrong passwords at sign-in and here share one record.
	retryAfter(t, thief.post("/login", url.Values{"username": {"alice"}, "password": {"password-alice"}}, jsonAccept))
	h.clock.Advance(wait)
	expectProblem(t, change("guess", jsonAccept), http.StatusForbidden, "wrong_password")
	if longer := retryAfter(t, change("guess", jsonAccept)); longer <= wait {
		t.Errorf("the wait after one more failure is %s, not longer than %s", longer, wait)
	}
	if st, _ := h.signInStatus("alice", "taken-over-1"); st == http.StatusSeeOther {
		t.Fatal("a refused change changed the password")
	}
}

// A site admin's reset link lets its person set a new password once, for
// an hour; it is stored only as a hash, a newer one replaces it, and using
// it ends every sign-in of theirs.
func TestResetLinkWorksOnceAndExpires(t *testing.T) {
	h := newHarness(t)
	root := h.user("root", true)
	alice := h.user("alice", false)
	type linkJSON struct {
		User      string    `json:"user"`
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	makeLink := func() (linkJSON, string) {
		t.Helper()
		res := root.post("/admin/users/alice/reset-password", nil, jsonAccept)
		if res.StatusCode != http.StatusOK || res.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("reset: %d %q %s", res.StatusCode, res.Header.Get("Cache-Control"), readBody(res))
		}
		l := decode[linkJSON](t, res)
		u, err := url.Parse(l.URL)
		if err != nil || u.Host != strings.TrimPrefix(h.srv.URL, "http://") || u.Path != "/password-reset" || len(u.Query().Get("token")) < 40 {
			t.Fatalf("link %q", l.URL)
		}
		if d := l.ExpiresAt.Sub(h.clock.Now()); d != time.Hour {
			t.Errorf("the link expires in %s, want an hour", d)
		}
		return l, u.Query().Get("token")
	}
	use := func(token, password string, hdr ...header) *http.Response {
		return h.anonymous().post("/password-reset", url.Values{"token": {token}, "new_password": {password}, "confirm": {password}}, hdr...)
	}

	// The page shows the link once.
	res := root.post("/admin/users/alice/reset-password", nil)
	if shown := readBody(res); res.StatusCode != http.StatusOK || !strings.Contains(shown, "/password-reset?token=") {
		t.Fatalf("the page of a new link: %d %.300s", res.StatusCode, shown)
	}
	if again := readBody(root.get("/admin/users", nil)); strings.Contains(again, "/password-reset?token=") {
		t.Error("the users page shows a link again")
	}

	l, token := makeLink()
	if err := h.tablesHolding(token); err != nil {
		t.Errorf("the token is stored as it is: %v", err)
	}
	// Until it is used, the password and the sign-ins stand.
	if !alice.signedIn() {
		t.Fatal("making a link ended alice's sign-in")
	}
	page := h.anonymous().page(strings.TrimPrefix(l.URL, h.srv.URL))
	if page.Find(`form#reset-password input[name="token"]`).AttrOr("value", "") != token || !strings.Contains(page.Text(), "alice") {
		t.Fatal("the link's page has no form for alice")
	}
	// A weak password does not use the link up.
	expectProblem(t, use(token, "short", jsonAccept), http.StatusBadRequest, "weak_password")
	res = use(token, "set-by-link-1")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?reset=1" {
		t.Fatalf("use: %d %q %s", res.StatusCode, res.Header.Get("Location"), readBody(res))
	}
	if alice.signedIn() {
		t.Error("alice's sign-in survived the reset of her password")
	}
	if st, _ := h.signInStatus("alice", "password-alice"); st != http.StatusUnauthorized {
		t.Errorf("the old password signs in after the reset: %d", st)
	}
	h.signInWith("alice", "set-by-link-1")
	// Once only, by form and by page.
	expectProblem(t, use(token, "set-by-link-2", jsonAccept), http.StatusGone, "reset_link_invalid")
	if res := h.anonymous().get(strings.TrimPrefix(l.URL, h.srv.URL), nil); res.StatusCode != http.StatusGone {
		t.Errorf("a used link's page: %d", res.StatusCode)
	}

	// A newer link replaces an older one.
	_, older := makeLink()
	_, newer := makeLink()
	expectProblem(t, use(older, "set-by-link-3", jsonAccept), http.StatusGone, "reset_link_invalid")

	// And it lasts an hour.
	h.clock.Advance(time.Hour + time.Second)
	expectProblem(t, use(newer, "set-by-link-4", jsonAccept), http.StatusGone, "reset_link_invalid")
	expectProblem(t, use("made-up-"+strings.Repeat("x", 40), "set-by-link-5", jsonAccept), http.StatusGone, "reset_link_invalid")
	h.signInWith("alice", "set-by-link-1")

	feed := feedText(root)
	for _, want := range []string{"root made a link for alice to set a new password", "alice set a new password with a reset link"} {
		if !strings.Contains(feed, want) {
			t.Errorf("the feed lacks %q: %q", want, feed)
		}
	}
}

// A disabled person cannot sign in, and what they had running ends: their
// sign-ins, their edit session (reason disabled) and its shell. Enabled
// again, they sign in.
func TestDisabledPersonCannotSignInAndTheirShellEnds(t *testing.T) {
	needRoot(t)
	disabledPersonCannotSignInAndTheirShellEnds(t, newHarness(t))
}

func TestDisabledPersonCannotSignInAndTheirShellEndsInAPod(t *testing.T) {
	needRoot(t)
	disabledPersonCannotSignInAndTheirShellEnds(t, newHarness(t, onKube(t)))
}

func disabledPersonCannotSignInAndTheirShellEnds(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	root := h.user("root", true)
	other := h.signInWith("owner", "password-owner")
	s, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	gone := shellGone(t, h, term.ID)

	expectProblem(t, root.post("/admin/users/root/disable", nil, jsonAccept), http.StatusConflict, "own_account")
	users := root.page("/admin/users")
	if users.Find(`form[action="/admin/users/root/disable"]`).Length() != 0 || users.Find(`form[action="/admin/users/owner/disable"]`).Length() != 1 {
		t.Error("the users page offers a site admin to disable themselves, or not the others")
	}
	res = root.post("/admin/users/owner/disable", nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("disable: %d %s", res.StatusCode, readBody(res))
	}
	if owner.signedIn() || other.signedIn() {
		t.Fatal("a disabled person is still signed in")
	}
	waitClosed(t, h, term.ID, "its person's disabling")
	wait.For(t, wait.Long, "the shell's process to end", gone)
	cs, err := h.store.SessionByID(t.Context(), s.ID)
	if err != nil || cs.State != models.SessionClosed || cs.CloseReason == nil || *cs.CloseReason != editsession.ReasonDisabled {
		t.Fatalf("the session after the disabling: %+v %v", cs, err)
	}
	st, body := h.signInStatus("owner", "password-owner")
	if st != http.StatusForbidden || !strings.Contains(body, "account_disabled") {
		t.Fatalf("a disabled person signs in: %d %s", st, body)
	}
	// A wrong password says nothing of the account.
	if st, body := h.signInStatus("owner", "wrong-password"); st != http.StatusUnauthorized || strings.Contains(body, "disabled") {
		t.Errorf("a wrong password for a disabled account: %d %s", st, body)
	}
	// No link sets a disabled account's password.
	expectProblem(t, root.post("/admin/users/owner/reset-password", nil, jsonAccept), http.StatusForbidden, "account_disabled")
	row := root.page("/admin/users").Find(`tr[data-user="owner"]`)
	if !strings.Contains(row.Text(), "disabled since") || row.Find(`form[action="/admin/users/owner/enable"]`).Length() != 1 {
		t.Errorf("the users page's row: %q", row.Text())
	}

	var enabled models.User
	enabled = decode[models.User](t, root.post("/admin/users/owner/enable", nil, jsonAccept))
	if enabled.Disabled() {
		t.Fatal("enable answered a disabled account")
	}
	again := h.signInWith("owner", "password-owner")
	if s2, _ := again.openSession(id); s2.ID == s.ID {
		t.Error("the disabled session was opened again")
	}
	feed := feedText(root)
	for _, want := range []string{"root disabled owner's account", "root enabled owner's account again", "the account was disabled"} {
		if !strings.Contains(feed, want) {
			t.Errorf("the feed lacks %q: %q", want, feed)
		}
	}
}

// Atelier always keeps a site admin who can sign in: the last one is not
// demoted, nor disabled, and two admins demoting each other at once leave
// one of them.
func TestLastSiteAdminCannotBeDemoted(t *testing.T) {
	h := newHarness(t)
	root := h.user("root", true)
	expectProblem(t, root.post("/admin/users/root/site-admin", url.Values{"admin": {"false"}}, jsonAccept), http.StatusConflict, "last_site_admin")
	expectProblem(t, root.post("/admin/users/root/site-admin", url.Values{"admin": {"maybe"}}, jsonAccept), http.StatusBadRequest, "bad_admin")
	expectProblem(t, root.post("/admin/users/ghost/site-admin", url.Values{"admin": {"true"}}, jsonAccept), http.StatusNotFound, "no_such_user")

	// A disabled admin does not count.
	h.user("bob", false)
	if u := decode[models.User](t, root.post("/admin/users/bob/site-admin", url.Values{"admin": {"true"}}, jsonAccept)); !u.IsAdmin {
		t.Fatal("bob was not made a site admin")
	}
	root.post("/admin/users/bob/disable", nil, jsonAccept)
	expectProblem(t, root.post("/admin/users/root/site-admin", url.Values{"admin": {"false"}}, jsonAccept), http.StatusConflict, "last_site_admin")
	root.post("/admin/users/bob/enable", nil, jsonAccept)
	bob := h.signInWith("bob", "password-bob")
	// The role takes effect at once: bob sees the users page.
	if res := bob.get("/admin/users", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("a new site admin's users page: %d", res.StatusCode)
	}

	// Two admins demote each other at once: one of them stays. The test
	// holds bob's row, so root's demotion of bob waits for it; bob's
	// demotion of root then runs, and either waits for root's (Atelier
	// locks every site admin's row before it counts them) or ends first.
	locked, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- h.store.Tx(t.Context(), func(tx *models.Store) error {
			if err := tx.Exec(t.Context(), `SELECT id FROM users WHERE username = 'bob' FOR UPDATE`); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	select {
	case <-locked:
	case err := <-held:
		t.Fatalf("holding bob's row: %v", err)
	}
	demote := func(c *client, target string) <-chan int {
		done := make(chan int, 1)
		go func() {
			res, err := c.http.PostForm(h.srv.URL+"/admin/users/"+target+"/site-admin",
				url.Values{"admin": {"false"}, "csrf_token": {c.csrf}})
			if err != nil {
				done <- 0
				return
			}
			res.Body.Close()
			done <- res.StatusCode
		}()
		return done
	}
	waiting := func() bool {
		return h.store.Exec(t.Context(), `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock') THEN RAISE EXCEPTION 'none'; END IF; END $$`) == nil
	}
	first := demote(root, "bob")
	wait.For(t, wait.Long, "root's demotion of bob to wait for bob's row", waiting)
	second := demote(bob, "root")
	select {
	case <-second:
		second = nil // it did not wait: it must have been refused or be alone
	case <-time.After(time.Second):
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	<-first
	if second != nil {
		<-second
	}
	admins := 0
	for _, name := range []string{"root", "bob"} {
		u, err := h.store.UserByName(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if u.IsAdmin {
			admins++
		}
	}
	if admins != 1 {
		t.Fatalf("%d site admins left after two demoted each other at once", admins)
	}
	if u, _ := h.store.UserByName(t.Context(), "root"); !u.IsAdmin {
		t.Fatal("root's demotion of bob, which came first, did not stand")
	}
	decode[models.User](t, root.post("/admin/users/bob/site-admin", url.Values{"admin": {"true"}}, jsonAccept))

	// Demoted, an admin is answered as anyone else at once.
	decode[models.User](t, root.post("/admin/users/bob/site-admin", url.Values{"admin": {"false"}}, jsonAccept))
	if res := bob.get("/admin/users", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("a demoted admin's users page: %d", res.StatusCode)
	}
	feed := feedText(root)
	for _, want := range []string{"root made bob a site admin", "took the site admin role from bob"} {
		if !strings.Contains(feed, want) {
			t.Errorf("the feed lacks %q: %q", want, feed)
		}
	}
}

// Every new URL of site admins answers anyone else, signed in or not, as a
// URL that does not exist, and changes nothing.
func TestPeopleRoutesHiddenFromNonAdmins(t *testing.T) {
	h := newHarness(t)
	plain := h.user("plain", false)
	h.user("alice", false)
	for _, who := range []struct {
		name string
		c    *client
	}{{"anonymous", h.anonymous()}, {"a person", plain}} {
		for _, path := range []string{
			"/admin/users/alice/reset-password",
			"/admin/users/alice/disable",
			"/admin/users/alice/enable",
			"/admin/users/alice/site-admin",
			"/admin/users/plain/site-admin",
		} {
			for _, hdr := range []header{jsonAccept, {"HX-Request": "true"}, {"Accept": "text/html"}} {
				res := who.c.post(path, url.Values{"admin": {"true"}}, hdr)
				if body := readBody(res); res.StatusCode != http.StatusNotFound || strings.Contains(body, "token=") {
					t.Errorf("%s POST %s %v: %d %.200s", who.name, path, hdr, res.StatusCode, body)
				}
			}
		}
	}
	if u, _ := h.store.UserByName(t.Context(), "plain"); u.IsAdmin {
		t.Error("a refused request made plain a site admin")
	}
	if st, _ := h.signInStatus("alice", "password-alice"); st != http.StatusSeeOther {
		t.Error("a refused request disabled alice")
	}
	if err := h.store.Exec(t.Context(), `DO $$ BEGIN IF EXISTS (SELECT 1 FROM password_resets) THEN RAISE EXCEPTION 'a link was made'; END IF; END $$`); err != nil {
		t.Error(err)
	}
	// The routes are there: a site admin reaches each of them.
	root := h.user("root", true)
	for _, path := range []string{"/admin/users/alice/reset-password", "/admin/users/alice/disable",
		"/admin/users/alice/enable", "/admin/users/alice/site-admin"} {
		if res := root.post(path, url.Values{"admin": {"true"}}, jsonAccept); res.StatusCode != http.StatusOK {
			t.Errorf("a site admin's POST %s: %d %s", path, res.StatusCode, readBody(res))
		}
	}
}
