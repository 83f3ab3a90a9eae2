package server

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"atelier/testrig/githttptest"
)

// hostileNames are names an attacker gives files so that a terminal, a
// diff or a file list shows something else: a newline that splits a
// listing, an escape sequence that recolours a terminal, a right-to-left
// override that shows "evil\u202etxt.exe" as "evilexe.txt", a name of
// spaces that looks like none. Each maps to how a page shows it.
var hostileNames = map[string]string{
	"a\nb.txt":          `a\x0ab.txt`,
	"\x1b[31mred":       `\x1b[31mred`,
	"evil\u202etxt.exe": `evil\u202etxt.exe`,
	"   ":               `\x20\x20\x20`,
}

// TestHostileNamesNeverEnter tries every way a path enters a project with
// each hostile name, as an owner would who wants it in the code: a save, a
// new file or folder and a rename in an edit session, a one-file Change, an
// archive's entry (tar and zip) and a git source's tree. Each is refused
// with a clear reason, and nothing reaches the session or canonical.
func TestHostileNamesNeverEnter(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ImportAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	owner, id, base := explorable(t, h)
	before := canonicalOf(t, h, id)
	repos := t.TempDir()
	n := 0
	for name := range hostileNames {
		n++
		paths := []string{name, "src/" + name, name + "/inside.txt"}
		t.Run(fmt.Sprintf("session %q", name), func(t *testing.T) {
			for _, path := range paths {
				expectProblem(t, owner.put(base, path, []byte("x"), nil), http.StatusBadRequest, "bad_path")
				expectProblem(t, owner.post(base+"/new-file", url.Values{"path": {path}}, jsonAccept), http.StatusBadRequest, "bad_path")
				expectProblem(t, owner.post(base+"/new-folder", url.Values{"path": {path}}, jsonAccept), http.StatusBadRequest, "bad_path")
				expectProblem(t, owner.post(base+"/rename", url.Values{"from": {"README.md"}, "to": {path}}, jsonAccept), http.StatusBadRequest, "bad_path")
				expectProblem(t, owner.post(base+"/rename", url.Values{"from": {"src"}, "to": {path}}, jsonAccept), http.StatusBadRequest, "bad_path")
			}
		})
		t.Run(fmt.Sprintf("one-file change %q", name), func(t *testing.T) {
			for _, path := range paths {
				expectProblem(t, owner.post("/projects/"+itoa(id)+"/code/edit", url.Values{"path": {path}, "content": {"x"},
					"base": {before}, "message": {"plant"}}, jsonAccept), http.StatusBadRequest, "bad_path")
			}
		})
		t.Run(fmt.Sprintf("archive %q", name), func(t *testing.T) {
			entries := []entry{{name: "README.md", body: "# Base\n"}, {name: "src/" + name, body: "x"}}
			for file, archive := range map[string][]byte{"hostile.tar.gz": tarGz(t, entries), "hostile.zip": zipOf(t, entries)} {
				p := expectProblem(t, owner.upload(id, file, archive, jsonAccept), http.StatusBadRequest, "bad_archive")
				if !strings.Contains(p.Error, fmt.Sprintf("%q", "src/"+name)) {
					t.Errorf("%s: the refusal does not name the entry: %s", file, p.Error)
				}
			}
		})
		t.Run(fmt.Sprintf("git source %q", name), func(t *testing.T) {
			repo := fmt.Sprintf("r%d.git", n)
			hostileRepo(t, filepath.Join(repos, repo), "src/"+name)
			srv := githttptest.New(t, repos, "", "")
			p := expectProblem(t, owner.post("/projects/"+itoa(id)+"/import", url.Values{"source": {"http://" + srv.Host + "/" + repo}}, jsonAccept),
				http.StatusBadRequest, "bad_source_tree")
			if !strings.Contains(p.Error, fmt.Sprintf("%q", "src/"+name)) {
				t.Errorf("the refusal does not name the path: %s", p.Error)
			}
			if srv.Requests() == 0 {
				t.Error("the source was never fetched: the refusal came from elsewhere")
			}
		})
	}
	if cs := decode[[]struct{ Path string }](t, owner.get(base+"/changes", jsonAccept)); len(cs) != 0 {
		t.Errorf("refused requests changed the session: %+v", cs)
	}
	if after := canonicalOf(t, h, id); after != before {
		t.Error("a refused import moved canonical")
	}
	if n := changeCount(t, h, id); n != 0 {
		t.Errorf("%d Changes were composed", n)
	}
}

// hostileRepo makes a bare repository at dir whose one commit holds
// README.md and path.
func hostileRepo(t *testing.T, dir, path string) {
	t.Helper()
	work := t.TempDir()
	writeTree(t, work, map[string]string{"README.md": "# Hostile\n", path: "x"})
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "add", "-A"},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "one"},
		{"clone", "-q", "--bare", work, dir},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// hostileFiles are the files of a tree that already holds hostile names:
// one file of each, and one inside a folder of spaces, whose breadcrumb is
// a folder.
func hostileFiles() map[string]string {
	files := map[string]string{"README.md": "# Base\n", "   /in.txt": "inside\n"}
	for name := range hostileNames {
		if strings.TrimSpace(name) != "" {
			files[name] = "hostile " + name
		}
	}
	return files
}

// expectShownEscaped checks the Code page of the project at p from a
// reader's side: each hostile name is listed in the tree escaped and is
// never written raw; its file opens with escaped breadcrumbs, says it is
// read-only and offers no "Edit this file"; its bytes download.
func expectShownEscaped(t *testing.T, c *client, p string) {
	t.Helper()
	doc := c.page(p + "/code?path=" + url.QueryEscape("   /in.txt"))
	tree := doc.Find(".tree-pane")
	for name, want := range hostileNames {
		item := tree.Find("[data-path]").FilterFunction(func(_ int, s *goquery.Selection) bool {
			path, _ := s.Attr("data-path")
			return path == name
		})
		if item.Length() != 1 {
			t.Errorf("the tree lists %q %d times", name, item.Length())
			continue
		}
		if got := strings.TrimSpace(item.Text()); got != want {
			t.Errorf("the tree shows %q as %q, want %q", name, got, want)
		}
		if item.Find(".esc").Length() == 0 {
			t.Errorf("the tree's %q has no escape set apart", name)
		}
	}
	for _, raw := range []string{"\x1b", "\u202e", "a\nb"} {
		if strings.Contains(tree.Text(), raw) {
			t.Errorf("the tree shows %q raw", raw)
		}
	}
	crumbs := doc.Find("#viewer .crumbs li")
	if crumbs.Length() != 2 || strings.TrimSpace(crumbs.First().Text()) != `\x20\x20\x20` || strings.TrimSpace(crumbs.Last().Text()) != "in.txt" {
		t.Errorf("breadcrumbs of a file in a folder of spaces: %q", crumbs.Text())
	}

	for name, want := range hostileNames {
		path, content := name, "hostile "+name
		if strings.TrimSpace(name) == "" {
			path, content = name+"/in.txt", "inside\n"
			want += "in.txt"
		}
		doc := c.page(p + "/code?path=" + url.QueryEscape(path))
		viewer := doc.Find("#viewer")
		if got := strings.Join(viewer.Find(".crumbs li").Map(func(_ int, s *goquery.Selection) string { return strings.TrimSpace(s.Text()) }), ""); got != want {
			t.Errorf("breadcrumbs of %q: %q, want %q", path, got, want)
		}
		if viewer.Find(".read-only").Length() != 1 || viewer.Find(".edit-file").Length() != 0 {
			t.Errorf("%q is not shown read-only", path)
		}
		if got := decode[map[string]any](t, c.get(p+"/code/file?path="+url.QueryEscape(path), jsonAccept)); got["readOnly"] != true {
			t.Errorf("%q as JSON: %v", path, got)
		}
		res := c.get(p+"/code/raw?path="+url.QueryEscape(path), nil)
		if body := readBody(res); res.StatusCode != http.StatusOK || body != content {
			t.Errorf("download of %q: %d %q", path, res.StatusCode, body)
		}
	}
}

// TestHostileNamesThatExistAreReadOnly: a Container repository whose tree
// got hostile names before the rule shows them escaped and read-only. An
// edit session reads them, refuses to write them, and may delete or rename
// them to a good name, which a Change carries.
func TestHostileNamesThatExistAreReadOnly(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	// The names arrive the way they did before the rule: in canonical's
	// history.
	work := t.TempDir()
	gitIn(t, work, "clone", "-q", canonicalDir(t, h, id), ".")
	writeTree(t, work, hostileFiles())
	gitIn(t, work, "add", "-A")
	gitIn(t, work, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "names from before")
	gitIn(t, work, "push", "-q", "origin", "HEAD:main")
	head := strings.TrimSpace(gitIn(t, work, "rev-parse", "HEAD"))
	if err := h.store.SetCanonicalCommit(context.Background(), id, head); err != nil {
		t.Fatal(err)
	}
	p := "/projects/" + itoa(id)
	expectShownEscaped(t, owner, p)

	for name := range hostileNames {
		path := name
		if strings.TrimSpace(name) == "" {
			path = name + "/in.txt"
		}
		expectProblem(t, owner.post(p+"/code/edit", url.Values{"path": {path}, "content": {"changed"}, "base": {head}}, jsonAccept),
			http.StatusBadRequest, "bad_path")
	}

	_, base := owner.session(id)
	if body, _, status := owner.read(base, "\x1b[31mred"); status != http.StatusOK || !strings.Contains(body, "hostile") {
		t.Fatalf("reading an existing hostile name in a session: %d %s", status, body)
	}
	expectProblem(t, owner.put(base, "\x1b[31mred", []byte("changed"), nil), http.StatusBadRequest, "bad_path")
	if res := owner.post(base+"/rename", url.Values{"from": {"\x1b[31mred"}, "to": {"red.txt"}}, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("renaming a hostile name to a good one: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.do(http.MethodDelete, base+"/file?path="+url.QueryEscape("a\nb.txt"), nil,
		header{"X-CSRF-Token": owner.csrf, "Accept": "application/json"}); res.StatusCode >= 300 {
		t.Fatalf("deleting a hostile name: %d %s", res.StatusCode, readBody(res))
	}
	res := owner.submit(base, "tidy names")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", res.StatusCode, readBody(res))
	}
	cid := decode[changeJSON](t, res).ChangeID
	doc := owner.page(p + "/changes/" + itoa(cid))
	shown := doc.Find("code.path").Map(func(_ int, s *goquery.Selection) string { return s.Text() })
	if joined := strings.Join(shown, " | "); !strings.Contains(joined, `\x1b[31mred`) || !strings.Contains(joined, `a\x0ab.txt`) ||
		strings.ContainsAny(joined, "\x1b\n") {
		t.Errorf("the Change shows its paths as %q", shown)
	}
}

// TestLocalHostileNamesShownEscaped: a Local folder holds whatever its
// owner wrote; its Code page shows the names escaped and read-only.
func TestLocalHostileNamesShownEscaped(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root-ann", true)
	folder := mkdirMode(t, filepath.Join(t.TempDir(), "work"), 0o755)
	writeTree(t, folder, hostileFiles())
	id := admin.mustCreateLocal("hostile", folder)
	expectShownEscaped(t, admin, "/projects/"+itoa(id))
}
