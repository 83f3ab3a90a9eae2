package server

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"atelier/models"
)

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

// A signed-in person who is not a member learns nothing: every URL of the
// project answers exactly like a project that does not exist. A member
// without the permission gets 403.
func TestProjectAuthorization(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	admin := h.user("helper", false)
	member := h.user("member", false)
	outsider := h.user("outsider", true) // a site admin is no project member either
	id := owner.createProject("secret")
	for name, role := range map[string]string{"helper": "admin", "member": "member"} {
		if res := owner.post("/projects/"+itoa(id)+"/members", url.Values{"username": {name}, "role": {role}}, jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("adding %s: %d %s", name, res.StatusCode, readBody(res))
		}
	}
	p := "/projects/" + itoa(id)
	missing := "/projects/999999"

	type req struct {
		method, path string
		form         url.Values
	}
	urls := func(base string) []req {
		return []req{
			{http.MethodGet, base, nil},
			{http.MethodPost, base + "/archive", nil},
			{http.MethodPost, base + "/members", url.Values{"username": {"outsider"}, "role": {"member"}}},
			{http.MethodDelete, base + "/members/member", nil},
			{http.MethodDelete, base, nil},
		}
	}
	send := func(c *client, r req, hdr header) *http.Response {
		if r.method == http.MethodPost {
			return c.post(r.path, r.form, hdr)
		}
		if r.method == http.MethodDelete {
			return c.del(r.path, hdr)
		}
		return c.get(r.path, hdr)
	}

	for _, r := range append(urls(p), urls(missing)...) {
		res := send(outsider, r, jsonAccept)
		got := expectProblem(t, res, http.StatusNotFound, "not_found")
		ref := expectProblem(t, send(outsider, req{http.MethodGet, missing, nil}, jsonAccept), http.StatusNotFound, "not_found")
		if got != ref {
			t.Errorf("%s %s: %+v differs from a missing project's %+v", r.method, r.path, got, ref)
		}
	}
	if res := outsider.get(p, nil); res.StatusCode != http.StatusNotFound || strings.Contains(readBody(res), "secret") {
		t.Fatal("the outsider's 404 page names the project")
	}
	if res := outsider.get("/projects/not-a-number", jsonAccept); res.StatusCode != http.StatusNotFound {
		t.Fatalf("malformed id: %d", res.StatusCode)
	}

	// A member reads but manages nothing.
	if res := member.get(p, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("member GET: %d", res.StatusCode)
	}
	for _, r := range urls(p)[1:] {
		expectProblem(t, send(member, r, jsonAccept), http.StatusForbidden, "forbidden")
	}
	// A project admin manages members but neither deletes the project nor
	// touches owners.
	expectProblem(t, admin.del(p, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, admin.post(p+"/members", url.Values{"username": {"member"}, "role": {"owner"}}, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, admin.del(p+"/members/owner", jsonAccept), http.StatusForbidden, "forbidden")
	if res := admin.del(p+"/members/member", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("admin removes a member: %d %s", res.StatusCode, readBody(res))
	}
	// The removed member is now an outsider.
	expectProblem(t, member.get(p, jsonAccept), http.StatusNotFound, "not_found")
	// The last owner stays.
	expectProblem(t, owner.del(p+"/members/owner", jsonAccept), http.StatusConflict, "last_owner")
	expectProblem(t, owner.post(p+"/members", url.Values{"username": {"owner"}, "role": {"member"}}, jsonAccept), http.StatusConflict, "last_owner")
	expectProblem(t, owner.post(p+"/members", url.Values{"username": {"ghost"}, "role": {"member"}}, jsonAccept), http.StatusBadRequest, "unknown_user")
	expectProblem(t, owner.post(p+"/members", url.Values{"username": {"helper"}, "role": {"god"}}, jsonAccept), http.StatusBadRequest, "bad_role")

	if res := admin.post(p+"/archive", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("admin archives: %d", res.StatusCode)
	}
}

func TestCreateContainerProject(t *testing.T) {
	h := newHarness(t)
	c := h.user("ann", false)
	res := c.post("/projects", url.Values{"name": {"My App!"}, "mode": {"container"}})
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/projects/") {
		t.Fatalf("create: %d %q %s", res.StatusCode, res.Header.Get("Location"), readBody(res))
	}
	doc := c.page(res.Header.Get("Location"))
	if got := strings.TrimSpace(doc.Find("h1").First().Text()); got != "My App!" {
		t.Fatalf("project page title %q", got)
	}
	if doc.Find(".tabs .tab.disabled").Length() != 0 {
		t.Fatal("the Code tab is closed on a ready container project")
	}

	// Same name twice: each folder's name ends in its project's id.
	first := c.post("/projects", url.Values{"name": {"twin"}}, jsonAccept)
	second := c.post("/projects", url.Values{"name": {"twin"}}, jsonAccept)
	a, b := decode[models.Project](t, first), decode[models.Project](t, second)
	if a.WorkspaceDirName != "twin--"+itoa(a.ID) || b.WorkspaceDirName != "twin--"+itoa(b.ID) || a.WorkspaceMode != "container" || a.WorkspacePath != nil {
		t.Fatalf("dir names %q and %q, mode %q path %v", a.WorkspaceDirName, b.WorkspaceDirName, a.WorkspaceMode, a.WorkspacePath)
	}
	dir := filepath.Join(h.cfg.WorkspacesRoot, a.WorkspaceDirName)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("managed folder: %v %v", fi, err)
	}

	expectProblem(t, c.post("/projects", url.Values{"name": {""}}, jsonAccept), http.StatusBadRequest, "bad_name")
	expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"docker"}}, jsonAccept), http.StatusBadRequest, "bad_mode")
	expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"container"}, "path": {"/srv/x"}}, jsonAccept), http.StatusBadRequest, "path_not_allowed")

	// Deleting removes the managed folder.
	if res := c.del("/projects/"+itoa(a.ID), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("managed folder survived the project: %v", err)
	}
	expectProblem(t, c.get("/projects/"+itoa(a.ID), jsonAccept), http.StatusNotFound, "not_found")
}

func TestCreateLocalProject(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	c := h.user("ann", false)
	folder := filepath.Join(t.TempDir(), "code")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}

	p := expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"local"}, "path": {"relative/dir"}}, jsonAccept),
		http.StatusBadRequest, "path_not_absolute")
	if p.Hint == "" {
		t.Fatal("a refused path comes without a hint")
	}
	p = expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"local"}, "path": {folder + "/missing"}}, jsonAccept),
		http.StatusBadRequest, "path_not_found")
	if h.cfg.InContainer && (!strings.Contains(p.Hint, "volumes:") || !strings.Contains(p.Hint, folder+"/missing:"+folder+"/missing")) {
		t.Fatalf("the mount hint lacks the compose line: %q", p.Hint)
	}
	if !h.cfg.InContainer && strings.Contains(p.Hint, "compose") {
		t.Fatalf("a native server's hint speaks of compose: %q", p.Hint)
	}
	expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"local"}, "path": {h.cfg.DataDir}}, jsonAccept),
		http.StatusBadRequest, "path_overlaps_server")
	expectProblem(t, c.post("/projects", url.Values{"name": {"x"}, "mode": {"local"}, "path": {"/etc"}}, jsonAccept),
		http.StatusBadRequest, "path_system")

	// The HTML form comes back with what was typed and the reason.
	res := c.post("/projects", url.Values{"name": {"mine"}, "mode": {"local"}, "path": {"/etc/"}})
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("form: %d", res.StatusCode)
	}
	body := readBody(res)
	if !strings.Contains(body, `data-reason="path_not_clean"`) || !strings.Contains(body, `value="mine"`) {
		t.Fatalf("the form does not show the refusal with the typed values:\n%s", body)
	}

	res = c.post("/projects", url.Values{"name": {"mine"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("local create: %d %s", res.StatusCode, readBody(res))
	}
	proj := decode[models.Project](t, res)
	if proj.WorkspaceMode != "local" || proj.WorkspacePath == nil || *proj.WorkspacePath != folder {
		t.Fatalf("created %+v", proj)
	}
	if entries, _ := os.ReadDir(folder); len(entries) != 0 {
		t.Fatalf("creation wrote into the person's folder: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.WorkspacesRoot, proj.WorkspaceDirName)); !os.IsNotExist(err) {
		t.Fatal("a local project got a managed folder")
	}
	// Deleting a Local project never touches the person's folder.
	if err := os.WriteFile(filepath.Join(folder, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := c.del("/projects/"+itoa(proj.ID), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	if b, err := os.ReadFile(filepath.Join(folder, "keep.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("the person's folder was touched: %v", err)
	}
}

func TestValidatePath(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	c := h.user("ann", false)
	folder := t.TempDir()

	type verdict struct {
		OK      bool   `json:"ok"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Hint    string `json:"hint"`
	}
	v := decode[verdict](t, c.post("/projects/validate-path", url.Values{"path": {"/proc/self/cwd"}}, jsonAccept))
	if v.OK || v.Reason != "path_system" || v.Hint == "" || v.Message == "" {
		t.Fatalf("system path verdict %+v", v)
	}
	v = decode[verdict](t, c.post("/projects/validate-path", url.Values{"path": {folder}}, jsonAccept))
	if !v.OK || v.Reason != "" {
		t.Fatalf("good path verdict %+v", v)
	}

	// htmx gets the partial alone, with the same reason as creation.
	res := c.post("/projects/validate-path", url.Values{"path": {"etc"}}, header{"HX-Request": "true"})
	body := readBody(res)
	if res.StatusCode != http.StatusOK || strings.Contains(body, "<html") || !strings.Contains(body, `data-reason="path_not_absolute"`) {
		t.Fatalf("htmx partial: %d %s", res.StatusCode, body)
	}
}

// An htmx request gets the page's fragment; a boosted one or a history
// restore gets the whole page; everything says Vary: HX-Request.
func TestPageOrFragment(t *testing.T) {
	h := newHarness(t)
	c := h.user("ann", false)
	c.createProject("frag")
	cases := []struct {
		name     string
		hdr      header
		wantHTML bool
	}{
		{"browser", nil, true},
		{"htmx", header{"HX-Request": "true"}, false},
		{"boosted", header{"HX-Request": "true", "HX-Boosted": "true"}, true},
		{"history restore", header{"HX-Request": "true", "HX-History-Restore-Request": "true"}, true},
	}
	for _, tc := range cases {
		res := c.get("/projects", tc.hdr)
		body := readBody(res)
		if res.StatusCode != http.StatusOK || strings.Contains(body, "<html") != tc.wantHTML || !strings.Contains(body, "frag") {
			t.Errorf("%s: %d, full page %v, want %v", tc.name, res.StatusCode, strings.Contains(body, "<html"), tc.wantHTML)
		}
		if !strings.Contains(res.Header.Get("Vary"), "HX-Request") {
			t.Errorf("%s: Vary = %q", tc.name, res.Header.Get("Vary"))
		}
	}
	list := decode[[]models.MemberProject](t, c.get("/projects", jsonAccept))
	if len(list) != 1 || list[0].Name != "frag" || list[0].Role != "owner" {
		t.Fatalf("JSON list %+v", list)
	}
}

func TestHealthz(t *testing.T) {
	h := newHarness(t)
	c := h.anonymous()
	if res := c.get("/healthz", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", res.StatusCode)
	}
	h.store.Close()
	if res := c.get("/healthz", nil); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("healthz without a database: %d", res.StatusCode)
	}
}

func TestArchive(t *testing.T) {
	h := newHarness(t)
	c := h.user("ann", false)
	id := c.createProject("old")
	res := c.post("/projects/"+itoa(id)+"/archive", nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("archive: %d", res.StatusCode)
	}
	doc := c.page("/projects/" + itoa(id))
	if doc.Find("h1 .badge.muted").Text() != "archived" {
		t.Fatal("the project page does not say archived")
	}
	if res := c.post("/projects/"+itoa(id)+"/archive", nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("archiving twice: %d", res.StatusCode)
	}
}

// The path check never tells anyone but a site admin where the server's
// own folders are. Outside ATELIER_LOCAL_ROOTS the data dir, the
// workspaces root, a folder inside them or above them is answered exactly
// as any other folder there is; inside the roots it is "not allowed", with
// its reason, and one answer for all of them, whatever the overlap. Site
// admins keep the detailed message and hint.
func TestValidatePathHidesTheServersFolders(t *testing.T) {
	outside := t.TempDir()
	roots := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		roots func(*Config) []string
	}{
		{"no roots", func(*Config) []string { return nil }},
		{"roots elsewhere", func(*Config) []string { return []string{roots} }},
		{"roots holding the data dir", func(c *Config) []string { return []string{filepath.Dir(c.DataDir)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.LocalRoots = tc.roots(c) })
			member := h.user("ann", false)
			admin := h.user("root", true)
			server := []string{h.cfg.DataDir, h.cfg.WorkspacesRoot, filepath.Join(h.cfg.DataDir, "x"), filepath.Dir(h.cfg.DataDir)}
			inRoots := len(h.cfg.LocalRoots) > 0 && strings.HasPrefix(h.cfg.DataDir, h.cfg.LocalRoots[0]+"/")
			// Outside the roots, the answer for any other folder.
			want := member.validatePath(outside)
			if want.OK || want.Reason != "local_not_allowed" {
				t.Fatalf("an ordinary folder outside the roots: %+v", want)
			}
			for _, p := range server {
				got := member.validatePath(p)
				for _, text := range []string{got.Message, got.Hint} {
					if strings.Contains(text, "server's own") || strings.Contains(text, h.cfg.DataDir) {
						t.Errorf("%s for a member: %q names the server's folders", p, text)
					}
				}
				if inRoots {
					want = member.validatePath(server[0])
					if got.OK || got.Reason != "path_overlaps_server" || !strings.Contains(got.Message, "not allowed") {
						t.Errorf("%s inside the roots for a member: %+v, want path_overlaps_server, not allowed", p, got)
					}
				}
				if got != want {
					t.Errorf("%s for a member: %+v, want %+v: the answer tells the server's folder apart", p, got, want)
				}
				// The project is refused with the same words.
				res := member.post("/projects", url.Values{"name": {"x"}, "mode": {"local"}, "path": {p}}, jsonAccept)
				if prob := decode[problem](t, res); prob.Reason != want.Reason || prob.Error != want.Message || prob.Hint != want.Hint {
					t.Errorf("creating at %s for a member: %+v, want %+v", p, prob, want)
				}
				v := admin.validatePath(p)
				if v.OK || v.Reason != "path_overlaps_server" || !strings.Contains(v.Message, "server's own folders") || v.Hint == "" {
					t.Errorf("%s for a site admin: %+v, want the detailed refusal", p, v)
				}
			}
		})
	}
}
