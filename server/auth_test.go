package server

import (
	"bufio"
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestSignInAndOut(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "correct horse", false); err != nil {
		t.Fatal(err)
	}
	c := h.anonymous()

	res := c.post("/login", url.Values{"username": {"ann"}, "password": {"wrong password"}})
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(readBody(res), "Wrong username or password") {
		t.Fatalf("wrong password: %d", res.StatusCode)
	}
	res = c.post("/login", url.Values{"username": {"nobody"}, "password": {"correct horse"}}, jsonAccept)
	expectProblem(t, res, http.StatusUnauthorized, "bad_credentials")

	res = c.post("/login", url.Values{"username": {"ann"}, "password": {"correct horse"}, "next": {"//evil.example/x"}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/projects" {
		t.Fatalf("login: %d to %q, want 303 to /projects (never off-site)", res.StatusCode, res.Header.Get("Location"))
	}
	cookie := findCookie(res, "atelier_session")
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Secure {
		t.Fatalf("session cookie = %+v; want HttpOnly, SameSite=Lax, not Secure over plain HTTP", cookie)
	}
	c.loadCSRF("/projects")

	res = c.post("/logout", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
		t.Fatalf("logout: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	res = c.get("/projects", nil)
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login?next=") {
		t.Fatalf("after logout /projects: %d %q, want a redirect to sign in", res.StatusCode, res.Header.Get("Location"))
	}
	// The old cookie is dead in the database, not only in this jar.
	replay := h.anonymous()
	replay.http.Jar.SetCookies(res.Request.URL, []*http.Cookie{{Name: "atelier_session", Value: cookie.Value}})
	expectProblem(t, replay.get("/projects", jsonAccept), http.StatusUnauthorized, "sign_in_required")
}

func TestSecureCookiesWhenConfigured(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SecureCookies = true })
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "correct horse", false); err != nil {
		t.Fatal(err)
	}
	c := h.anonymous()
	res := c.post("/login", url.Values{"username": {"ann"}, "password": {"correct horse"}})
	if cookie := findCookie(res, "atelier_session"); cookie == nil || !cookie.Secure {
		t.Fatalf("session cookie = %+v; want Secure", cookie)
	}
}

func findCookie(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Every request that changes state needs the token of the caller's own pages.
func TestCSRF(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("p")
	project := "/projects/" + itoa(id)

	anon := h.anonymous()
	expectProblem(t, anon.postRaw("/login", url.Values{"username": {"owner"}, "password": {"password-owner"}}, jsonAccept),
		http.StatusForbidden, "csrf")

	attacks := []struct {
		name   string
		method string
		path   string
		token  string // "" sends none
		header bool
	}{
		{"create without token", http.MethodPost, "/projects", "", false},
		{"create with a forged token", http.MethodPost, "/projects", "forged", false},
		{"create with the anonymous token", http.MethodPost, "/projects", anon.csrf, false},
		{"archive without token", http.MethodPost, project + "/archive", "", false},
		{"members without token", http.MethodPost, project + "/members", "", false},
		{"delete without token", http.MethodDelete, project, "", true},
		{"delete with a forged header", http.MethodDelete, project, "forged", true},
		{"logout without token", http.MethodPost, "/logout", "", false},
		{"validate-path without token", http.MethodPost, "/projects/validate-path", "", false},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			form := url.Values{"name": {"x"}, "username": {"owner"}, "role": {"member"}}
			hdr := header{"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
			if a.token != "" {
				if a.header {
					hdr["X-CSRF-Token"] = a.token
				} else {
					form.Set("csrf_token", a.token)
				}
			}
			res := owner.do(a.method, a.path, strings.NewReader(form.Encode()), hdr)
			expectProblem(t, res, http.StatusForbidden, "csrf")
		})
	}
	// Nothing above changed anything.
	doc := owner.page(project)
	if doc.Find(".badge.muted").Length() != 0 {
		t.Fatal("the project was archived by a request without a CSRF token")
	}

	// The header (htmx) and the form field (plain forms) both work.
	res := owner.postRaw("/projects", url.Values{"name": {"by-header"}}, header{"X-CSRF-Token": owner.csrf, "Accept": "application/json"})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("header token: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.post("/projects", url.Values{"name": {"by-field"}}, jsonAccept); res.StatusCode != http.StatusCreated {
		t.Fatalf("form token: %d %s", res.StatusCode, readBody(res))
	}
}

func TestAdminUsers(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root", true)
	plain := h.user("plain", false)

	expectProblem(t, plain.post("/admin/users", url.Values{"username": {"eve"}, "password": {"longenough"}}, jsonAccept),
		http.StatusForbidden, "site_admin_only")
	if res := plain.get("/admin/users", nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("users page for a non-admin: %d", res.StatusCode)
	}

	res := admin.post("/admin/users", url.Values{"username": {"dora"}, "password": {"dora-pass"}, "admin": {"true"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("add user: %d %s", res.StatusCode, readBody(res))
	}
	doc := admin.page("/admin/users")
	if !strings.Contains(doc.Find("table.users").Text(), "dora") {
		t.Fatal("dora is not listed")
	}
	expectProblem(t, admin.post("/admin/users", url.Values{"username": {"dora"}, "password": {"another-pass"}}, jsonAccept),
		http.StatusConflict, "user_exists")
	expectProblem(t, admin.post("/admin/users", url.Values{"username": {"Bad Name"}, "password": {"longenough"}}, jsonAccept),
		http.StatusBadRequest, "bad_username")
	expectProblem(t, admin.post("/admin/users", url.Values{"username": {"short"}, "password": {"short"}}, jsonAccept),
		http.StatusBadRequest, "weak_password")

	dora := h.anonymous()
	if res := dora.post("/login", url.Values{"username": {"dora"}, "password": {"dora-pass"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the new user cannot sign in: %d", res.StatusCode)
	}
	dora.loadCSRF("/projects")
	if res := dora.get("/admin/users", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("a new site admin cannot open the users page: %d", res.StatusCode)
	}
}

func TestAnonymousIsSentToSignIn(t *testing.T) {
	h := newHarness(t)
	c := h.anonymous()
	res := c.get("/projects/new", nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next=%2Fprojects%2Fnew" {
		t.Fatalf("anonymous page: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	expectProblem(t, c.get("/projects", jsonAccept), http.StatusUnauthorized, "sign_in_required")
}

// Under TLS the session cookie is Secure without any setting.
func TestSecureCookiesUnderTLS(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "correct horse", false); err != nil {
		t.Fatal(err)
	}
	tls := httptest.NewTLSServer(h.app.Handler)
	defer tls.Close()
	client := tls.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client.Jar, _ = cookiejar.New(nil)
	res, err := client.Get(tls.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	csrf := findCookie(res, "atelier_csrf")
	res.Body.Close()
	if csrf == nil || !csrf.Secure {
		t.Fatalf("CSRF cookie over TLS = %+v; want Secure", csrf)
	}
	res, err = client.PostForm(tls.URL+"/login", url.Values{"username": {"ann"}, "password": {"correct horse"}, "csrf_token": {csrf.Value}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if cookie := findCookie(res, "atelier_session"); res.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.Secure {
		t.Fatalf("login over TLS: %d, cookie %+v; want 303 and a Secure cookie", res.StatusCode, cookie)
	}
}

// The live bus reaches site admins: an event recorded now arrives on
// /admin/events; others are refused.
func TestAdminEventStream(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root", true)
	plain := h.user("plain", false)
	if res := plain.get("/admin/events", nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a non-admin reached the bus: %d", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/admin/events", nil)
	res, err := admin.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	id := admin.createProject("watched")
	admin.post("/projects/"+itoa(id)+"/sessions", nil, jsonAccept)
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"type":"code.session.opened"`) {
			return
		}
	}
	t.Fatal("no code.session.opened on the admin stream")
}
