package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/models"
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
	if cookie := findCookie(res, "__Host-atelier_session"); cookie == nil || !cookie.Secure || cookie.Path != "/" || cookie.Domain != "" {
		t.Fatalf("session cookie = %+v; want __Host-atelier_session, Secure, for / of this host alone", cookie)
	}
	if findCookie(res, "atelier_session") != nil {
		t.Fatal("a Secure session cookie also went out under its bare name")
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
		http.StatusNotFound, "not_found")
	if res := plain.get("/admin/users", nil); res.StatusCode != http.StatusNotFound {
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

// Under TLS the cookies are Secure without any setting, and named with the
// __Host- prefix, which a browser takes only from this very origin over
// HTTPS. A cookie of the bare name, which a sibling subdomain or port could
// toss in, is not read: a CSRF token planted that way does not pass, and a
// sign-in planted that way does not sign the visitor in.
func TestSecureCookiesUnderTLS(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "correct horse", false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.app.Auth.CreateUser(t.Context(), "mallory", "mallory's pw", false); err != nil {
		t.Fatal(err)
	}
	tls := httptest.NewTLSServer(h.app.Handler)
	defer tls.Close()
	browser := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Transport: tls.Client().Transport, Jar: jar,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	client := browser()
	res, err := client.Get(tls.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	csrf := findCookie(res, "__Host-atelier_csrf")
	res.Body.Close()
	if csrf == nil || !csrf.Secure || csrf.Path != "/" || csrf.Domain != "" {
		t.Fatalf("CSRF cookie over TLS = %+v; want __Host-atelier_csrf, Secure, for / of this host alone", csrf)
	}
	res, err = client.PostForm(tls.URL+"/login", url.Values{"username": {"ann"}, "password": {"correct horse"}, "csrf_token": {csrf.Value}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if cookie := findCookie(res, "__Host-atelier_session"); res.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.Secure {
		t.Fatalf("login over TLS: %d, cookie %+v; want 303 and a Secure __Host- cookie", res.StatusCode, cookie)
	}

	// Login CSRF by cookie tossing: the attacker's page on a sibling origin
	// set atelier_csrf to a token of its own and posts it with its
	// credentials, from a client that sends no Origin.
	u, _ := url.Parse(tls.URL)
	tossed := strings.Repeat("t", 43)
	victim := browser()
	victim.Jar.SetCookies(u, []*http.Cookie{{Name: "atelier_csrf", Value: tossed}})
	req, _ := http.NewRequest(http.MethodPost, tls.URL+"/login",
		strings.NewReader(url.Values{"username": {"mallory"}, "password": {"mallory's pw"}, "csrf_token": {tossed}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	res, err = victim.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if findCookie(res, "__Host-atelier_session") != nil || findCookie(res, "atelier_session") != nil {
		t.Fatal("a tossed CSRF cookie signed the visitor in")
	}
	expectProblem(t, res, http.StatusForbidden, "csrf")

	// A sign-in tossed under the bare name is not one.
	mallory := browser()
	res, err = mallory.Get(tls.URL + "/login")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	res, err = mallory.PostForm(tls.URL+"/login", url.Values{"username": {"mallory"}, "password": {"mallory's pw"},
		"csrf_token": {findCookie(res, "__Host-atelier_csrf").Value}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	session := findCookie(res, "__Host-atelier_session")
	if session == nil {
		t.Fatalf("mallory's own sign-in: %d", res.StatusCode)
	}
	victim.Jar.SetCookies(u, []*http.Cookie{{Name: "atelier_session", Value: session.Value}})
	req, _ = http.NewRequest(http.MethodGet, tls.URL+"/projects", nil)
	req.Header.Set("Accept", "application/json")
	res, err = victim.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	expectProblem(t, res, http.StatusUnauthorized, "sign_in_required")
}

// The live bus reaches site admins: an event recorded now arrives on
// /admin/events; others are answered as if it did not exist.
func TestAdminEventStream(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root", true)
	plain := h.user("plain", false)
	if res := plain.get("/admin/events", nil); res.StatusCode != http.StatusNotFound {
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

// A browser says where a request comes from (Sec-Fetch-Site, or at least
// Origin), and a state-changing request from another site is refused
// whatever token it carries: a page on a sibling origin that tossed in a
// CSRF cookie of its choosing, and posts the matching token with its own
// credentials, does not sign the visitor in as itself. Same-origin
// requests, and clients that send neither header, go on to the token.
func TestCrossOriginRequestsAreRefused(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	if _, err := h.app.Auth.CreateUser(t.Context(), "mallory", "mallory's pw", false); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(h.srv.URL)
	crossSite := []header{
		{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://sibling." + u.Hostname() + ":8081"}, // a sibling subdomain
		{"Origin": "http://evil.example"},                                                     // a browser without Sec-Fetch-Site
		{"Origin": "http://" + u.Hostname() + ":1"},                                           // a sibling port
		{"Sec-Fetch-Site": "cross-site"},
	}
	for _, from := range crossSite {
		// Cookie tossing: a valid-looking pair the attacker chose.
		victim := h.anonymous()
		tossed := strings.Repeat("t", 43)
		victim.http.Jar.SetCookies(u, []*http.Cookie{{Name: "atelier_csrf", Value: tossed}})
		hdr := header{"Accept": "application/json"}
		for k, v := range from {
			hdr[k] = v
		}
		res := victim.postRaw("/login", url.Values{"username": {"mallory"}, "password": {"mallory's pw"}, "csrf_token": {tossed}}, hdr)
		if findCookie(res, "atelier_session") != nil {
			t.Fatalf("%v: a cross-site sign-in set a session", from)
		}
		p := expectProblem(t, res, http.StatusForbidden, "cross_origin")
		if !strings.Contains(p.Error, "another site") {
			t.Errorf("%v: the refusal says %q", from, p.Error)
		}
		// Signed in, with the page's own token: still refused.
		expectProblem(t, owner.post("/projects", url.Values{"name": {"forged"}}, hdr), http.StatusForbidden, "cross_origin")
		expectProblem(t, owner.postRaw("/logout", url.Values{}, header{"X-CSRF-Token": owner.csrf}, hdr), http.StatusForbidden, "cross_origin")
	}
	if ps := decode[[]models.MemberProject](t, owner.get("/projects", jsonAccept)); len(ps) != 0 {
		t.Fatalf("cross-site requests made projects: %+v", ps)
	}

	// The site's own pages, a typed URL (Sec-Fetch-Site: none), an older
	// browser whose Origin is this host, and clients with neither header.
	sameSite := []header{
		{"Sec-Fetch-Site": "same-origin", "Origin": h.srv.URL},
		{"Sec-Fetch-Site": "none"},
		{"Origin": h.srv.URL},
		{},
	}
	for i, from := range sameSite {
		c := h.anonymous()
		hdr := header{}
		for k, v := range from {
			hdr[k] = v
		}
		res := c.post("/login", url.Values{"username": {"mallory"}, "password": {"mallory's pw"}}, hdr)
		if res.StatusCode != http.StatusSeeOther || findCookie(res, "atelier_session") == nil {
			t.Fatalf("%v: sign-in from this site: %d %s", from, res.StatusCode, readBody(res))
		}
		if res := owner.post("/projects", url.Values{"name": {"own-" + itoa(int64(i))}}, hdr, jsonAccept); res.StatusCode != http.StatusCreated {
			t.Fatalf("%v: create from this site: %d %s", from, res.StatusCode, readBody(res))
		}
	}
}

// Nobody but a site admin can tell that any /admin URL exists. Every route
// under /admin, in its method, answers someone signed out, a member and a
// project's owner exactly as an /admin URL no route serves does (same
// status, headers that matter and page), with or without the CSRF token,
// from this site or another, as JSON, htmx or a browser, and one slash
// off; and none of them changes anything.
func TestEveryAdminURLIsNotFoundToOthers(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	member := h.user("member", false)
	root := h.user("root", true)
	id := owner.createProject("mine")
	if res := owner.post("/projects/"+itoa(id)+"/members", url.Values{"username": {"member"}, "role": {"member"}}, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("add the member: %d %s", res.StatusCode, readBody(res))
	}
	sid := openSessionRow(t, h, owner, id)
	fill := strings.NewReplacer(":sid", sid, ":tid", "term_x", ":id", itoa(id), ":user", "member")

	type route struct{ method, path string }
	var routes []route
	for _, r := range h.app.Handler.(*gin.Engine).Routes() {
		if r.Path == "/admin" || strings.HasPrefix(r.Path, "/admin/") {
			routes = append(routes, route{r.Method, fill.Replace(r.Path)})
		}
	}
	if len(routes) < 12 {
		t.Fatalf("found %d /admin routes, want every one of routes.go: %v", len(routes), routes)
	}
	form := url.Values{"username": {"eve"}, "password": {"eve's password"}, "admin": {"true"}, "capSeconds": {"1"}}
	send := func(c *client, method, path string, token bool, hdr header) *http.Response {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		if token {
			f.Set("csrf_token", c.csrf)
		}
		if method == http.MethodGet {
			return c.do(method, path, nil, hdr)
		}
		return c.do(method, path, strings.NewReader(f.Encode()), hdr)
	}
	kinds := []header{jsonAccept, {"HX-Request": "true"}, {"Accept": "text/html"}, {"Accept": "text/event-stream"}}
	for _, who := range []struct {
		name string
		c    *client
	}{{"signed out", h.anonymous()}, {"a member", member}, {"the project's owner", owner}} {
		for _, r := range routes {
			for _, path := range []string{r.path, r.path + "/"} {
				for _, kind := range kinds {
					for _, crossSite := range []bool{false, true} {
						for _, token := range []bool{true, false} {
							hdr := header{"Content-Type": "application/x-www-form-urlencoded"}
							for k, v := range kind {
								hdr[k] = v
							}
							if crossSite {
								hdr["Sec-Fetch-Site"] = "cross-site"
								hdr["Origin"] = "http://evil.example"
							}
							got := send(who.c, r.method, path, token, hdr)
							want := send(who.c, r.method, "/admin/no-such-page", token, hdr)
							where := fmt.Sprintf("%s: %s %s %v token=%v", who.name, r.method, path, hdr, token)
							gotBody, wantBody := readBody(got), readBody(want)
							if got.StatusCode != http.StatusNotFound || got.StatusCode != want.StatusCode {
								t.Errorf("%s: %d, want %d as a URL that does not exist: %.300s", where, got.StatusCode, want.StatusCode, gotBody)
								continue
							}
							for _, k := range []string{"Content-Type", "Location", "Retry-After", "HX-Redirect"} {
								if got.Header.Get(k) != want.Header.Get(k) {
									t.Errorf("%s: %s %q, want %q", where, k, got.Header.Get(k), want.Header.Get(k))
								}
							}
							if gotBody != wantBody {
								t.Errorf("%s: the page differs from one that does not exist:\n%.400s\nwant\n%.400s", where, gotBody, wantBody)
							}
						}
					}
				}
			}
		}
	}
	if _, err := h.store.UserByName(t.Context(), "eve"); err == nil {
		t.Error("a refused POST /admin/users made a user")
	}
	if u := usageOf(t, h, id); u.Cap != h.cfg.SandboxCap {
		t.Errorf("a refused cap changed the cap to %d", u.Cap)
	}
	if cs, _ := h.store.SessionByID(t.Context(), sid); cs.State != models.SessionOpen {
		t.Errorf("a refused end ended the session: %s", cs.State)
	}
	if u, err := h.store.UserByName(t.Context(), "member"); err != nil || u.IsAdmin || u.Disabled() {
		t.Errorf("refused requests changed the member's account: %+v %v", u, err)
	}
	// The routes are there for a site admin.
	if res := root.get("/admin/users", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("the users page for a site admin: %d", res.StatusCode)
	}
}
