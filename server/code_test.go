package server

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"atelier/models"
	"atelier/storage"
	"atelier/testrig/miniotest"
	"atelier/testrig/wait"
)

// entry is one member of a test archive.
type entry struct {
	name, body, link string
	dir              bool
}

func tarGz(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h = &tar.Header{Name: e.name + "/", Mode: 0o755, Typeflag: tar.TypeDir}
		case e.link != "":
			h = &tar.Header{Name: e.name, Linkname: e.link, Typeflag: tar.TypeSymlink}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func zipOf(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		body := e.body
		if e.link != "" {
			h.SetMode(fs.ModeSymlink | 0o777)
			body = e.link
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	zw.Close()
	return buf.Bytes()
}

// upload posts an archive to the project's import, as the page's script
// does: the token in the header.
func (c *client) upload(id int64, filename string, archive []byte, hdr header) *http.Response {
	c.h.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("archive", filename)
	fw.Write(archive)
	mw.Close()
	h := header{"Content-Type": mw.FormDataContentType(), "X-CSRF-Token": c.csrf}
	for k, v := range hdr {
		h[k] = v
	}
	return c.do(http.MethodPost, "/projects/"+itoa(id)+"/import", &body, h)
}

func (c *client) project(id int64) models.Project {
	c.h.t.Helper()
	var v struct {
		Project models.Project `json:"project"`
	}
	res := c.get("/projects/"+itoa(id), jsonAccept)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("project %d: %d", id, res.StatusCode)
	}
	v = decode[struct {
		Project models.Project `json:"project"`
	}](c.h.t, res)
	return v.Project
}

var sampleTree = []entry{
	{name: "app", dir: true},
	{name: "app/README.md", body: "# Sample\n"},
	{name: "app/main.go", body: "package main\n\nfunc main() {}\n"},
	{name: "app/web/index.html", body: "<script>alert(document.cookie)</script>\n"},
	{name: "app/web/logo.bin", body: "PNG\x00\x01\x02binary"},
	{name: "app/docs/big.txt", body: strings.Repeat("a long line of text\n", 60_000)},
	{name: "app/link", link: "main.go"},
}

func TestCodePageContainer(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	member := h.user("member", false)
	outsider := h.user("outsider", false)
	id := owner.createProject("sample")
	owner.addMember(id, "member", "member")
	first := *owner.project(id).CanonicalCommit

	// An empty project has a first commit and an empty tree.
	if es := decode[[]map[string]any](t, owner.get("/projects/"+itoa(id)+"/code/tree", jsonAccept)); len(es) != 0 {
		t.Fatalf("a new project lists %v", es)
	}

	res := owner.upload(id, "sample.tar.gz", tarGz(t, sampleTree), nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/projects/"+itoa(id)+"/code" {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	commit := *owner.project(id).CanonicalCommit
	if commit == first {
		t.Fatal("the import made no commit")
	}

	// The page shows the commit and the root, with the single top folder
	// unwrapped; folders first.
	doc := member.page("/projects/" + itoa(id) + "/code")
	if got, _ := doc.Find("#code-head .commit").Attr("title"); got != commit {
		t.Fatalf("header commit %q, want %q", got, commit)
	}
	var names []string
	doc.Find(".tree-pane > ul.tree > li").Each(func(_ int, s *goquery.Selection) { names = append(names, strings.Fields(s.Text())[0]) })
	if strings.Join(names, ",") != "docs,web,README.md,link,main.go" {
		t.Fatalf("root listing %v", names)
	}

	// A folder's level as a fragment and as JSON.
	res = member.get("/projects/"+itoa(id)+"/code/tree?path=web", header{"HX-Request": "true"})
	body := readBody(res)
	if res.StatusCode != http.StatusOK || strings.Contains(body, "<html") || !strings.Contains(body, `data-path="web/index.html"`) {
		t.Fatalf("tree fragment: %d %s", res.StatusCode, body)
	}
	type jsonEntry struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Size int64  `json:"size"`
	}
	es := decode[[]jsonEntry](t, member.get("/projects/"+itoa(id)+"/code/tree?path=web", jsonAccept))
	if len(es) != 2 || es[0] != (jsonEntry{"index.html", "file", 40}) || es[1].Name != "logo.bin" {
		t.Fatalf("tree JSON %+v", es)
	}

	// The viewer: highlighted with line numbers; binary; too large.
	res = member.get("/projects/"+itoa(id)+"/code/file?path=main.go", header{"HX-Request": "true"})
	body = readBody(res)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `class="chroma"`) || !strings.Contains(body, `id="L3"`) || !strings.Contains(body, "func") {
		t.Fatalf("highlighted file: %d %s", res.StatusCode, body)
	}
	if body := readBody(member.get("/projects/"+itoa(id)+"/code/file?path=web/logo.bin", nil)); !strings.Contains(body, "Binary file") {
		t.Fatal("a binary file is not shown as binary")
	}
	if body := readBody(member.get("/projects/"+itoa(id)+"/code/file?path=docs/big.txt", nil)); !strings.Contains(body, "too large to display") {
		t.Fatal("a 1.2 MB text file is not refused for display")
	}

	// Raw bytes can never run in our origin.
	res = member.get("/projects/"+itoa(id)+"/code/raw?path=web/index.html", nil)
	if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Content-Security-Policy") != "sandbox" ||
		strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("raw headers: %v", res.Header)
	}
	if got := readBody(res); got != "<script>alert(document.cookie)</script>\n" {
		t.Fatalf("raw body %q", got)
	}

	// Outsiders learn nothing; members do not import; archives are
	// checked.
	for _, p := range []string{"/code", "/code/tree", "/code/file?path=main.go", "/code/raw?path=main.go", "/remotes"} {
		expectProblem(t, outsider.get("/projects/"+itoa(id)+p, jsonAccept), http.StatusNotFound, "not_found")
	}
	expectProblem(t, member.upload(id, "x.tar.gz", tarGz(t, sampleTree), jsonAccept), http.StatusForbidden, "forbidden")
}

func TestCodePaths(t *testing.T) {
	h := newHarness(t)
	c := h.user("owner", false)
	id := c.createProject("paths")
	if res := c.upload(id, "a.zip", zipOf(t, []entry{{name: "a/b.txt", body: "b"}, {name: "%2e%2e/x", body: "literal"}}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	base := "/projects/" + itoa(id) + "/code/file?path="
	for _, bad := range []string{"../x", "a/../../x", "/etc/passwd", ".git/config", "a/.git/HEAD", "a/./b.txt", "a\x00b", strings.Repeat("a/", 2500) + "x", "a//b.txt", "a/"} {
		expectProblem(t, c.get(base+url.QueryEscape(bad), jsonAccept), http.StatusBadRequest, "bad_path")
		expectProblem(t, c.get("/projects/"+itoa(id)+"/code/raw?path="+url.QueryEscape(bad), jsonAccept), http.StatusBadRequest, "bad_path")
	}
	expectProblem(t, c.get("/projects/"+itoa(id)+"/code/tree?path=..", jsonAccept), http.StatusBadRequest, "bad_path")
	// %2e%2e is a name like any other.
	if got := decode[map[string]any](t, c.get(base+url.QueryEscape("%2e%2e/x"), jsonAccept)); got["size"] != float64(7) {
		t.Fatalf("literal %%2e%%2e: %v", got)
	}
	expectProblem(t, c.get(base+"missing.txt", jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, c.get("/projects/"+itoa(id)+"/code/tree?path=nope", jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, c.get(base+"a", jsonAccept), http.StatusBadRequest, "is_dir")
}

func TestImportRefusesHostileArchives(t *testing.T) {
	h := newHarness(t)
	c := h.user("owner", false)
	id := c.createProject("hostile")
	before := *c.project(id).CanonicalCommit
	archives := map[string][]byte{
		"dot-dot":        tarGz(t, []entry{{name: "ok.txt", body: "x"}, {name: "../evil", body: "x"}}),
		"git dir":        tarGz(t, []entry{{name: "ok.txt", body: "x"}, {name: "sub/.git/config", body: "[core]"}}),
		"link out":       tarGz(t, []entry{{name: "ok.txt", body: "x"}, {name: "l", link: "../../etc/passwd"}}),
		"absolute link":  tarGz(t, []entry{{name: "ok.txt", body: "x"}, {name: "l", link: "/etc/passwd"}}),
		"zip dot-dot":    zipOf(t, []entry{{name: "ok.txt", body: "x"}, {name: "a/../../evil", body: "x"}}),
		"not an archive": []byte("just some text that is no archive"),
	}
	for name, archive := range archives {
		p := expectProblem(t, c.upload(id, name, archive, jsonAccept), http.StatusBadRequest, "bad_archive")
		if p.Error == "" {
			t.Errorf("%s: no message", name)
		}
		if want := "Bad archive: upload a .tar.gz or .zip file."; name == "not an archive" && p.Error != want {
			t.Errorf("%s: message %q, want %q", name, p.Error, want)
		}
	}
	if after := *c.project(id).CanonicalCommit; after != before {
		t.Fatal("a refused import moved canonical")
	}
	expectProblem(t, c.post("/projects/"+itoa(id)+"/import", nil, jsonAccept), http.StatusBadRequest, "nothing_to_import")
}

func TestImportFromGit(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root", true)
	plain := h.user("plain", false)
	src := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "trunk", src},
		{"-C", src, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", "one"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hi\n"), 0o644)
	exec.Command("git", "-C", src, "add", ".").Run()
	if out, err := exec.Command("git", "-C", src, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "two").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}

	pid := plain.createProject("mine")
	expectProblem(t, plain.post("/projects/"+itoa(pid)+"/import", url.Values{"source": {src}}, jsonAccept), http.StatusBadRequest, "bad_source")
	expectProblem(t, plain.post("/projects/"+itoa(pid)+"/import", url.Values{"source": {"ext::sh -c touch% /tmp/pwned"}}, jsonAccept), http.StatusBadRequest, "bad_source")

	aid := admin.createProject("cloned")
	res := admin.post("/projects/"+itoa(aid)+"/import", url.Values{"source": {src}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("site admin imports a server-local repository: %d %s", res.StatusCode, readBody(res))
	}
	got := decode[map[string]any](t, admin.get("/projects/"+itoa(aid)+"/code/file?path=hello.txt", jsonAccept))
	if got["size"] != float64(3) {
		t.Fatalf("imported file: %v", got)
	}
	// The import keeps the source's history as a second parent.
	repo := filepath.Join(h.cfg.DataDir, "git", "project-"+itoa(aid)+".git")
	out, err := exec.Command("git", "--git-dir", repo, "rev-list", "--count", "HEAD").Output()
	if err != nil || strings.TrimSpace(string(out)) != "4" {
		t.Fatalf("history after import: %q %v (want first commit + import + the source's two)", out, err)
	}
}

func TestCodePageLocal(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	c := h.user("owner", false)
	folder := filepath.Join(t.TempDir(), "work")
	os.MkdirAll(filepath.Join(folder, "src"), 0o755)
	os.WriteFile(filepath.Join(folder, "src", "app.py"), []byte("print('hi')\n"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(folder, "passwd"))
	os.Symlink("../../../../../../etc", filepath.Join(folder, "src", "up"))
	if err := syscall.Mkfifo(filepath.Join(folder, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(folder, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, args := range [][]string{
		{"init", "-q", "-b", "feature", folder},
		{"-C", folder, "remote", "add", "origin", "https://user:secret-token@git.example.com/team/work.git?x=1#frag"},
		{"-C", folder, "remote", "add", "mirror", "git@example.com:team/work.git"},
		{"-C", folder, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", "start"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	res := c.post("/projects", url.Values{"name": {"local"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	p := "/projects/" + itoa(id)

	doc := c.page(p + "/code")
	if doc.Find("#code-head .badge").First().Text() != "feature" || doc.Find("#code-head .commit").Length() != 1 {
		t.Fatalf("header: %q", doc.Find("#code-head").Text())
	}
	kinds := map[string]string{}
	for _, e := range decode[[]struct{ Name, Type, Target string }](t, c.get(p+"/code/tree", jsonAccept)) {
		kinds[e.Name] = e.Type
	}
	if kinds["passwd"] != "symlink" || kinds["pipe"] != "other" || kinds["sock"] != "other" || kinds["src"] != "dir" || kinds[".git"] != "" {
		t.Fatalf("listing kinds %v", kinds)
	}

	// Reads never leave the folder and never hang on a FIFO.
	done := make(chan struct{})
	go func() {
		defer close(done)
		expectProblem(t, c.get(p+"/code/file?path=passwd", jsonAccept), http.StatusForbidden, "outside_root")
		expectProblem(t, c.get(p+"/code/raw?path=passwd", jsonAccept), http.StatusForbidden, "outside_root")
		expectProblem(t, c.get(p+"/code/tree?path=src/up", jsonAccept), http.StatusForbidden, "outside_root")
		expectProblem(t, c.get(p+"/code/file?path=pipe", jsonAccept), http.StatusUnsupportedMediaType, "not_regular_file")
		expectProblem(t, c.get(p+"/code/file?path=sock", jsonAccept), http.StatusUnsupportedMediaType, "not_regular_file")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("reading the Local folder hung")
	}
	if res := c.get("/healthz", nil); res.StatusCode != http.StatusOK {
		t.Fatal("the server stopped answering")
	}
	got := decode[map[string]any](t, c.get(p+"/code/file?path=src/app.py", jsonAccept))
	if got["size"] != float64(12) {
		t.Fatalf("local file: %v", got)
	}

	type remote struct{ Name, FetchURL, PushURL string }
	rs := decode[struct {
		IsRepo  bool
		Remotes []remote
	}](t, c.get(p+"/remotes", jsonAccept))
	if !rs.IsRepo || len(rs.Remotes) != 2 {
		t.Fatalf("remotes %+v", rs)
	}
	for _, r := range rs.Remotes {
		if strings.Contains(r.FetchURL, "secret") || strings.Contains(r.FetchURL, "?") || strings.Contains(r.FetchURL, "#") {
			t.Fatalf("a remote leaks: %+v", r)
		}
	}
	expectProblem(t, c.upload(id, "x.zip", zipOf(t, []entry{{name: "a", body: "b"}}), jsonAccept), http.StatusConflict, "local_project")

	// A Local row tampered into /etc is refused loudly, never served.
	if err := h.store.Exec(context.Background(), "UPDATE projects SET workspace_path = '/etc' WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
	expectProblem(t, c.get(p+"/code/tree", jsonAccept), http.StatusInternalServerError, "unsafe_root")
}

func TestCodeTabGate(t *testing.T) {
	h := newHarness(t)
	c := h.user("owner", false)
	id := c.createProject("gated")
	dir := c.project(id).WorkspaceDirName
	if err := os.RemoveAll(filepath.Join(h.cfg.WorkspacesRoot, dir)); err != nil {
		t.Fatal(err)
	}
	expectProblem(t, c.get("/projects/"+itoa(id)+"/code", jsonAccept), http.StatusConflict, "workspace_not_ready")
	doc := c.page("/projects/" + itoa(id))
	if doc.Find(".tabs .tab.disabled").Length() != 1 {
		t.Fatal("the Code tab is open on a project that is not ready")
	}
}

// A canonical commit the object store missed (the store was down) is
// published by the start-up sweep.
func TestPublishPending(t *testing.T) {
	h := newHarness(t)
	c := h.user("owner", false)
	id := c.createProject("pending")
	commit := *c.project(id).CanonicalCommit
	ctx := context.Background()
	if err := h.store.Exec(ctx, "DELETE FROM published_commits WHERE commit_sha = ?", commit); err != nil {
		t.Fatal(err)
	}
	if ps, err := h.store.UnpublishedProjects(ctx); err != nil || len(ps) != 1 || ps[0].ID != id {
		t.Fatalf("unpublished before the sweep: %+v %v", ps, err)
	}
	// A restarted server knows only what the database says.
	restarted, err := New(ctx, h.cfg, h.store, slog.New(slog.DiscardHandler), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Bus.Close()
	defer restarted.Events.Close()
	if err := restarted.Projects.PublishPending(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, err := h.store.UnpublishedProjects(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("unpublished after the sweep: %+v %v", ps, err)
	}
}

// With the code store on S3 (a real MinIO), the Code page reads from it, and
// when MinIO dies a freshly started server still shows the code through git.
func TestCodePageSurvivesObjectStoreOutage(t *testing.T) {
	minio := miniotest.Start(t)
	h := newHarness(t, func(c *Config) { c.S3 = minio.Config("atelier") })
	c := h.user("owner", false)
	id := c.createProject("s3")
	archive := tarGz(t, []entry{{name: "src/a.go", body: "package a\n"}, {name: "go.mod", body: "module a\n"}})
	if res := c.upload(id, "a.tar.gz", archive, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	ctx := context.Background()
	if ps, err := h.store.UnpublishedProjects(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("the import was not published to S3: %v %v", ps, err)
	}

	minio.Kill()
	// Starting against a dead endpoint is refused at once, naming it.
	if _, err := New(ctx, h.cfg, h.store, slog.New(slog.DiscardHandler), time.Now); err == nil {
		t.Fatal("a server whose S3 endpoint is down started without complaint")
	}
	// The running server, cold for this folder, falls back to git.
	start := time.Now()
	got := decode[map[string]any](t, c.get("/projects/"+itoa(id)+"/code/file?path=src/a.go", jsonAccept))
	if got["size"] != float64(10) {
		t.Fatalf("file with MinIO gone: %v", got)
	}
	if es := decode[[]map[string]any](t, c.get("/projects/"+itoa(id)+"/code/tree?path=src", jsonAccept)); len(es) != 1 {
		t.Fatalf("tree with MinIO gone: %v", es)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("reads took %v with the object store down", time.Since(start))
	}
}

// A publish that failed while MinIO was down lands once it is back, without
// a restart: the server's retry pass finds the commit and stores it.
func TestPublishRetriedWhenObjectStoreReturns(t *testing.T) {
	minio := miniotest.Start(t)
	h := newHarness(t, func(c *Config) { c.S3 = minio.Config("atelier") })
	c := h.user("owner", false)
	id := c.createProject("retry")
	minio.Kill()
	archive := tarGz(t, []entry{{name: "a.txt", body: "imported while the store was down\n"}})
	if res := c.upload(id, "a.tar.gz", archive, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import with MinIO down: %d %s", res.StatusCode, readBody(res))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.app.Projects.KeepPublished(ctx, 100*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	if ps, err := h.store.UnpublishedProjects(ctx); err != nil || len(ps) != 1 || ps[0].ID != id {
		t.Fatalf("unpublished while MinIO is down: %+v %v", ps, err)
	}
	if err := minio.Restart(); err != nil {
		t.Fatal(err)
	}
	wait.ForNil(t, wait.Long, "every project to be published once MinIO came back", func() error {
		ps, err := h.store.UnpublishedProjects(ctx)
		if err == nil && len(ps) != 0 {
			err = fmt.Errorf("still unpublished: %+v", ps)
		}
		return err
	})
	// What was recorded is really in the store.
	commit := *c.project(id).CanonicalCommit
	root, err := h.store.PublishedRoot(ctx, commit)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := storage.NewS3(ctx, minio.Config("atelier"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := objects.Get(ctx, "trees/"+root)
	if err != nil {
		t.Fatalf("the published root tree is not in MinIO: %v", err)
	}
	rc.Close()
}
