package server

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"atelier/models"
)

// mkdirMode makes dir (and its parents) and gives dir exactly mode.
func mkdirMode(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (c *client) createLocal(name, folder string) *http.Response {
	return c.post("/projects", url.Values{"name": {name}, "mode": {"local"}, "path": {folder}}, jsonAccept)
}

func (c *client) mustCreateLocal(name, folder string) int64 {
	c.h.t.Helper()
	res := c.createLocal(name, folder)
	if res.StatusCode != http.StatusCreated {
		c.h.t.Fatalf("create local %s at %s: %d %s", name, folder, res.StatusCode, readBody(res))
	}
	return decode[models.Project](c.h.t, res).ID
}

type pathVerdict struct {
	OK      bool   `json:"ok"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

func (c *client) validatePath(folder string) pathVerdict {
	return decode[pathVerdict](c.h.t, c.post("/projects/validate-path", url.Values{"path": {folder}}, jsonAccept))
}

// Only the folders the operator lists are open to everyone; a site admin
// may use any folder the guard allows. Another account's private home is
// the case that mattered: a member could read it as root.
func TestLocalProjectsAreAnOperatorsDecision(t *testing.T) {
	base := t.TempDir()
	shared := mkdirMode(t, filepath.Join(base, "shared"), 0o755)
	h := newHarness(t, func(c *Config) { c.LocalRoots = []string{shared} })
	member := h.user("ann", false)
	admin := h.user("root-ann", true)

	home := mkdirMode(t, filepath.Join(base, "home", "alice"), 0o700)
	if err := os.WriteFile(filepath.Join(home, "diary.txt"), []byte("private"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	elsewhere := mkdirMode(t, filepath.Join(base, "elsewhere", "app"), 0o755)

	for _, folder := range []string{home, elsewhere, filepath.Join(base, "elsewhere", "missing"), shared + "x"} {
		p := expectProblem(t, member.createLocal("mine", folder), http.StatusForbidden, "local_not_allowed")
		if !strings.Contains(p.Hint, "ATELIER_LOCAL_ROOTS") || !strings.Contains(p.Error, shared) {
			t.Fatalf("refusal of %s must name the allowed folder and the setting: %+v", folder, p)
		}
		if v := member.validatePath(folder); v.OK || v.Reason != "local_not_allowed" || !strings.Contains(v.Hint, "ATELIER_LOCAL_ROOTS") {
			t.Fatalf("live check of %s for a member: %+v", folder, v)
		}
	}
	// A link inside the allowed folder does not take a member out of it.
	if err := os.Symlink(home, filepath.Join(shared, "alice")); err != nil {
		t.Fatal(err)
	}
	expectProblem(t, member.createLocal("mine", filepath.Join(shared, "alice")), http.StatusForbidden, "local_not_allowed")
	// The HTML form answers 403 with the reason and what was typed.
	res := member.post("/projects", url.Values{"name": {"mine"}, "mode": {"local"}, "path": {home}})
	if body := readBody(res); res.StatusCode != http.StatusForbidden || !strings.Contains(body, `data-reason="local_not_allowed"`) {
		t.Fatalf("form refusal: %d %s", res.StatusCode, body)
	}
	if ps := decode[[]models.MemberProject](t, member.get("/projects", jsonAccept)); len(ps) != 0 {
		t.Fatalf("a refused creation left projects behind: %+v", ps)
	}

	// Inside the listed folder, members create as before.
	inside := mkdirMode(t, filepath.Join(shared, "team", "app"), 0o755)
	if v := member.validatePath(inside); !v.OK {
		t.Fatalf("live check inside the allowed folder: %+v", v)
	}
	member.mustCreateLocal("team app", inside)
	res = member.post("/projects", url.Values{"name": {"form app"}, "mode": {"local"}, "path": {shared}})
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/projects/") {
		t.Fatalf("form creation inside the allowed folder: %d %s", res.StatusCode, readBody(res))
	}

	// A site admin may use a folder outside the list, even someone's home.
	if v := admin.validatePath(elsewhere); !v.OK {
		t.Fatalf("live check for a site admin: %+v", v)
	}
	admin.mustCreateLocal("admin app", elsewhere)
	id := admin.mustCreateLocal("alice", home)
	if got := decode[map[string]any](t, admin.get("/projects/"+itoa(id)+"/code/file?path=diary.txt", jsonAccept)); got["size"] != float64(7) {
		t.Fatalf("the admin's project reads: %v", got)
	}

	// The form says who may use what before anything is typed.
	doc := member.page("/projects/new")
	if offer := doc.Find(".local-offer"); offer.AttrOr("data-local", "") != "roots" || !strings.Contains(offer.Text(), shared) {
		t.Fatalf("the member's form offers %q: %q", offer.AttrOr("data-local", ""), offer.Text())
	}
	if _, disabled := doc.Find(`input[name=mode][value=local]`).Attr("disabled"); disabled {
		t.Fatal("Local is disabled for a member who has folders")
	}
	if offer := admin.page("/projects/new").Find(".local-offer"); offer.AttrOr("data-local", "") != "anywhere" {
		t.Fatalf("the admin's form offers %q", offer.AttrOr("data-local", ""))
	}
}

// Without ATELIER_LOCAL_ROOTS, the default, Local projects are for site
// admins only, and the form says so.
func TestLocalProjectsDefaultToAdminsOnly(t *testing.T) {
	h := newHarness(t)
	member := h.user("ann", false)
	admin := h.user("root-ann", true)
	folder := mkdirMode(t, filepath.Join(t.TempDir(), "app"), 0o755)

	p := expectProblem(t, member.createLocal("mine", folder), http.StatusForbidden, "local_not_allowed")
	if !strings.Contains(p.Hint, "ATELIER_LOCAL_ROOTS") {
		t.Fatalf("hint %q does not name the setting", p.Hint)
	}
	doc := member.page("/projects/new")
	if offer := doc.Find(".local-offer"); offer.AttrOr("data-local", "") != "none" || !strings.Contains(offer.Text(), "ATELIER_LOCAL_ROOTS") {
		t.Fatalf("the member's form says %q: %q", offer.AttrOr("data-local", ""), offer.Text())
	}
	if _, disabled := doc.Find(`input[name=mode][value=local]`).Attr("disabled"); !disabled {
		t.Fatal("Local is offered to a member although no folder is listed")
	}
	admin.mustCreateLocal("admin app", folder)
}

// A folder a session user could swap after the check is refused, for site
// admins too: under a folder a session user owns, under a folder anyone may
// write. A sticky folder such as /tmp is fine, as only owners rename there.
func TestLocalFolderOwnership(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root-ann", true)
	base := t.TempDir()
	sessionUID := int(h.cfg.Sandbox.UIDBase + 7)

	owned := mkdirMode(t, filepath.Join(base, "owned"), 0o755)
	if err := os.Chown(owned, sessionUID, sessionUID); err != nil {
		t.Fatal(err)
	}
	underSession := mkdirMode(t, filepath.Join(owned, "app"), 0o755)
	open := mkdirMode(t, filepath.Join(base, "open"), 0o777)
	underOpen := mkdirMode(t, filepath.Join(open, "app"), 0o755)
	sticky := mkdirMode(t, filepath.Join(base, "sticky"), 0o777|os.ModeSticky)
	underSticky := mkdirMode(t, filepath.Join(sticky, "app"), 0o755)
	ownApp := mkdirMode(t, filepath.Join(base, "own"), 0o755)
	if err := os.Chown(ownApp, sessionUID, sessionUID); err != nil {
		t.Fatal(err)
	}

	for _, folder := range []string{underSession, underOpen, ownApp} {
		p := expectProblem(t, admin.createLocal("x", folder), http.StatusBadRequest, "path_unsafe_owner")
		if p.Hint == "" {
			t.Fatalf("refusal of %s has no hint", folder)
		}
		if v := admin.validatePath(folder); v.OK || v.Reason != "path_unsafe_owner" || v.Message == "" {
			t.Fatalf("live check of %s: %+v", folder, v)
		}
	}
	if v := admin.validatePath(underSticky); !v.OK {
		t.Fatalf("live check under a sticky folder: %+v", v)
	}
	admin.mustCreateLocal("sticky", underSticky)
}

// localGitFolder makes a git repository with one committed file and a
// remote, the way a person's checkout looks.
func localGitFolder(t *testing.T, folder string) {
	t.Helper()
	mkdirMode(t, folder, 0o755)
	if err := os.WriteFile(filepath.Join(folder, "app.py"), []byte("print('hi')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", folder},
		{"-C", folder, "remote", "add", "origin", "https://git.example.com/team/work.git"},
		{"-C", folder, "add", "app.py"},
		{"-C", folder, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "start"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
}

// localReads are every way a member reads a Local project's folder: the
// Code page as HTML and as JSON, a folder, a file and its bytes, the
// remotes, and opening an edit session, which forks the folder's
// repository. The paths name what a link to / would expose.
func localReads(p string) []struct{ method, path string } {
	return []struct{ method, path string }{
		{http.MethodGet, p + "/code"},
		{http.MethodGet, p + "/code?path=etc/shadow"},
		{http.MethodGet, p + "/code/tree"},
		{http.MethodGet, p + "/code/tree?path=etc"},
		{http.MethodGet, p + "/code/file?path=etc/shadow"},
		{http.MethodGet, p + "/code/raw?path=etc/shadow"},
		{http.MethodGet, p + "/code/file?path=app.py"},
		{http.MethodGet, p + "/remotes"},
		{http.MethodPost, p + "/sessions"},
	}
}

// expectRootMoved asserts that every read of the project answers 409
// root_moved, to JSON clients and browsers alike, and that no answer
// carries the host's password files.
func expectRootMoved(t *testing.T, c *client, id int64) {
	t.Helper()
	shadow, _ := os.ReadFile("/etc/shadow")
	for _, r := range localReads("/projects/" + itoa(id)) {
		for _, hdr := range []header{jsonAccept, nil} {
			var res *http.Response
			if r.method == http.MethodPost {
				res = c.post(r.path, nil, hdr)
			} else {
				res = c.get(r.path, hdr)
			}
			body := readBody(res)
			if res.StatusCode != http.StatusConflict || !strings.Contains(body, "root_moved") {
				t.Fatalf("%s %s (%v): %d %s, want 409 root_moved", r.method, r.path, hdr, res.StatusCode, body)
			}
			if strings.Contains(body, "root:") || (len(shadow) > 0 && strings.Contains(body, string(shadow[:min(len(shadow), 20)]))) {
				t.Fatalf("%s %s served the host's files: %s", r.method, r.path, body)
			}
		}
	}
}

// expectReadable asserts the project's folder reads as it did at creation.
func expectReadable(t *testing.T, c *client, id int64) {
	t.Helper()
	p := "/projects/" + itoa(id)
	if got := decode[map[string]any](t, c.get(p+"/code/file?path=app.py", jsonAccept)); got["size"] != float64(12) {
		t.Fatalf("file: %v", got)
	}
	doc := c.page(p + "/code")
	if doc.Find("#code-head .badge").First().Text() != "main" {
		t.Fatalf("header: %q", doc.Find("#code-head").Text())
	}
	rs := decode[struct {
		IsRepo  bool
		Remotes []struct{ Name string }
	}](t, c.get(p+"/remotes", jsonAccept))
	if !rs.IsRepo || len(rs.Remotes) != 1 {
		t.Fatalf("remotes %+v", rs)
	}
	s, _ := c.openSession(id)
	if res := c.post(p+"/sessions/"+s.ID+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("discard: %d %s", res.StatusCode, readBody(res))
	}
}

// The attack: the owner of a Local project (or anyone who can rename its
// folder) swaps it for a link to / after creation, or for another folder.
// Every read answers 409 root_moved and nothing from the host is served;
// putting the very folder back makes it readable again.
func TestLocalFolderReplacedAfterCreation(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	owner := h.user("ann", false)
	tests := []struct {
		name string
		// swap replaces folder, a project's folder in its own parent,
		// and returns how to put it back, or nil when it cannot be.
		swap func(t *testing.T, folder string) (restore func())
	}{
		{"replaced by a link to /", func(t *testing.T, folder string) func() {
			rename(t, folder, folder+".old")
			symlink(t, "/", folder)
			return func() { os.Remove(folder); rename(t, folder+".old", folder) }
		}},
		{"replaced by a link to itself moved", func(t *testing.T, folder string) func() {
			rename(t, folder, folder+".old")
			symlink(t, filepath.Base(folder)+".old", folder)
			return func() { os.Remove(folder); rename(t, folder+".old", folder) }
		}},
		{"the folder above replaced by a link to a copy of the way", func(t *testing.T, folder string) func() {
			parent := filepath.Dir(folder)
			rename(t, parent, parent+".old")
			symlink(t, parent+".old", parent)
			return func() { os.Remove(parent); rename(t, parent+".old", parent) }
		}},
		{"moved away", func(t *testing.T, folder string) func() {
			rename(t, folder, folder+".old")
			return func() { rename(t, folder+".old", folder) }
		}},
		{"moved away and another folder in its place", func(t *testing.T, folder string) func() {
			rename(t, folder, folder+".old")
			localGitFolder(t, folder)
			return nil
		}},
	}
	base := t.TempDir()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			folder := filepath.Join(base, itoa(int64(i)), "work")
			localGitFolder(t, folder)
			id := owner.mustCreateLocal("work "+itoa(int64(i)), folder)
			expectReadable(t, owner, id)
			restore := tt.swap(t, folder)
			expectRootMoved(t, owner, id)
			if restore != nil {
				restore()
				expectReadable(t, owner, id)
			}
		})
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// Rows from before identities were recorded are never read until the
// start-up adoption confirms them against today's creation rules for their
// creator: a member's folder inside ATELIER_LOCAL_ROOTS and a site admin's
// anywhere are adopted, a member's folder outside is not.
func TestLocalProjectsFromBeforeIdentities(t *testing.T) {
	base := t.TempDir()
	shared := mkdirMode(t, filepath.Join(base, "shared"), 0o755)
	h := newHarness(t, func(c *Config) { c.LocalRoots = []string{shared} })
	member := h.user("ann", false)
	admin := h.user("root-ann", true)
	ctx := context.Background()

	inside := filepath.Join(shared, "inside")
	localGitFolder(t, inside)
	outside := filepath.Join(base, "outside")
	localGitFolder(t, outside)
	adminsOutside := filepath.Join(base, "admins")
	localGitFolder(t, adminsOutside)

	adopted := member.mustCreateLocal("inside", inside)
	byAdmin := admin.mustCreateLocal("admins", adminsOutside)
	// A member's project outside the roots, as the old code let anyone
	// create it: made inside, then pointed elsewhere in the database.
	refused := member.mustCreateLocal("outside", filepath.Join(shared, "inside"))
	if err := h.store.Exec(ctx, "UPDATE projects SET workspace_path = ? WHERE id = ?", outside, refused); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Exec(ctx, "UPDATE projects SET workspace_real_path = NULL, workspace_dev = NULL, workspace_ino = NULL"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{adopted, refused} {
		expectProblem(t, member.get("/projects/"+itoa(id)+"/code/tree", jsonAccept), http.StatusConflict, "root_moved")
	}
	expectProblem(t, admin.get("/projects/"+itoa(byAdmin)+"/code/tree", jsonAccept), http.StatusConflict, "root_moved")

	if err := h.app.Projects.RecordLocalIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	expectReadable(t, member, adopted)
	expectReadable(t, admin, byAdmin)
	expectProblem(t, member.get("/projects/"+itoa(refused)+"/code/tree", jsonAccept), http.StatusConflict, "root_moved")
	p, err := h.store.ProjectByID(ctx, adopted)
	if err != nil || p.WorkspaceRealPath == nil || *p.WorkspaceRealPath != inside {
		t.Fatalf("adopted row: %+v, %v", p, err)
	}
}

func TestLoadConfigLocalRoots(t *testing.T) {
	load := func(roots string) (Config, error) {
		return LoadConfig(func(key string) string {
			if key == "ATELIER_LOCAL_ROOTS" {
				return roots
			}
			return ""
		})
	}
	cfg, err := load("")
	if err != nil || len(cfg.LocalRoots) != 0 {
		t.Fatalf("unset: %v, %v; want no folders", cfg.LocalRoots, err)
	}
	cfg, err = load("/srv/code::/home/shared:")
	if err != nil || strings.Join(cfg.LocalRoots, ",") != "/srv/code,/home/shared" {
		t.Fatalf("two folders: %v, %v", cfg.LocalRoots, err)
	}
	for _, bad := range []string{"srv/code", "/srv/code/", "/srv/../etc", "/srv/code:relative"} {
		if _, err := load(bad); err == nil || !strings.Contains(err.Error(), "ATELIER_LOCAL_ROOTS") {
			t.Errorf("%q: err = %v, want a refusal naming the setting", bad, err)
		}
	}
}

// Several instances (a cluster secret) start only on a shared PostgreSQL
// and an S3 store, and say so; an internal address must be one.
func TestLoadConfigCluster(t *testing.T) {
	load := func(env map[string]string) error {
		_, err := LoadConfig(func(key string) string { return env[key] })
		return err
	}
	secret := strings.Repeat("s", 32)
	for name, env := range map[string]map[string]string{
		"no database": {"ATELIER_CLUSTER_SECRET": secret, "ATELIER_S3_ENDPOINT": "minio:9000"},
		"no store":    {"ATELIER_CLUSTER_SECRET": secret, "DATABASE_URL": "postgres://db/atelier"},
	} {
		if err := load(env); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") || !strings.Contains(err.Error(), "ATELIER_S3_ENDPOINT") {
			t.Errorf("%s: err = %v, want a refusal naming both settings", name, err)
		}
	}
	full := map[string]string{"ATELIER_CLUSTER_SECRET": secret, "DATABASE_URL": "postgres://db/atelier", "ATELIER_S3_ENDPOINT": "minio:9000",
		"ATELIER_INTERNAL_URL": "http://10.0.0.5:8080"}
	if err := load(full); err != nil {
		t.Fatalf("a full cluster config: %v", err)
	}
	full["ATELIER_CLUSTER_SECRET"] = "short"
	if err := load(full); err == nil || !strings.Contains(err.Error(), "ATELIER_CLUSTER_SECRET") {
		t.Errorf("a short secret: %v", err)
	}
	full["ATELIER_CLUSTER_SECRET"] = secret
	for _, bad := range []string{"10.0.0.5:8080", "ftp://host", "http://host/path", "http://user@host:1", "http://host?x=1"} {
		full["ATELIER_INTERNAL_URL"] = bad
		if err := load(full); err == nil || !strings.Contains(err.Error(), "ATELIER_INTERNAL_URL") {
			t.Errorf("internal URL %q: %v", bad, err)
		}
	}
	full["ATELIER_INTERNAL_URL"] = "http://10.0.0.5:8080"
	for _, bad := range []string{"10.0.0.6:8080", "file:///srv", "http://host/path", "http://user@host:1"} {
		full["ATELIER_LOCAL_HOST"] = bad
		if err := load(full); err == nil || !strings.Contains(err.Error(), "ATELIER_LOCAL_HOST") {
			t.Errorf("Local host %q: %v", bad, err)
		}
	}
	full["ATELIER_LOCAL_HOST"] = "http://10.0.0.5:8080/"
	if cfg, err := LoadConfig(func(key string) string { return full[key] }); err != nil {
		t.Errorf("the instance naming itself: %v", err)
	} else if here, _ := cfg.localHome(); !here {
		t.Error("the instance ATELIER_LOCAL_HOST names does not serve Local projects")
	}
}
