package server

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// explorable is editable's project with a link in it, and the owner's
// session on it.
func explorable(t *testing.T, h *harness) (*client, int64, string) {
	t.Helper()
	owner := h.user("owner", false)
	id := owner.createProject("explore-me")
	res := owner.upload(id, "base.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: "# Base\n"},
		{name: "src/main.go", body: "package main\n\nfunc main() {}\n"},
		{name: "src/old.txt", body: "old\r\nbytes"},
		{name: "src/link", link: "main.go"},
	}), jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	_, base := owner.session(id)
	return owner, id, base
}

// treeFragment is the session tree as htmx asks for it after an edit.
func (c *client) treeFragment(base string, open ...string) *goquery.Document {
	c.h.t.Helper()
	q := url.Values{"open": open}
	res := c.get(base+"/tree?"+q.Encode(), header{"HX-Request": "true"})
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("tree: %d %s", res.StatusCode, readBody(res))
	}
	doc, err := goquery.NewDocumentFromReader(res.Body)
	if err != nil {
		c.h.t.Fatal(err)
	}
	return doc
}

// TestExplorerRename renames a file and a folder over HTTP and sees the
// result in the tree: the old paths struck through as deletions, the new
// ones added with the same bytes, the folders that were open still open.
func TestExplorerRename(t *testing.T) {
	h := newHarness(t)
	owner, _, base := explorable(t, h)

	res := owner.post(base+"/rename", url.Values{"from": {"src/old.txt"}, "to": {"docs/old.txt"}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("rename: %d %s", res.StatusCode, readBody(res))
	}
	type moved struct {
		Moved []struct{ From, To string } `json:"moved"`
	}
	if m := decode[moved](t, res); len(m.Moved) != 1 || m.Moved[0].From != "src/old.txt" || m.Moved[0].To != "docs/old.txt" {
		t.Fatalf("moved = %+v", m)
	}
	if body, _, status := owner.read(base, "docs/old.txt"); status != http.StatusOK || body != "old\r\nbytes" {
		t.Fatalf("renamed file: %d %q", status, body)
	}
	if _, _, status := owner.read(base, "src/old.txt"); status != http.StatusNotFound {
		t.Fatalf("old path still reads: %d", status)
	}

	doc := owner.treeFragment(base, "src", "docs")
	if doc.Find(".explorer-bar [data-act=new-file]").Length() != 1 || doc.Find(`[role="tree"]`).Length() != 1 {
		t.Fatal("the tree has no explorer toolbar or tree role")
	}
	deleted := doc.Find(`li.deleted[data-path="src/old.txt"] [role="treeitem"].deleted-file`)
	if deleted.Length() != 1 || deleted.Find(".mark").Text() != "D" || doc.Find(`li.deleted [data-act=restore]`).Length() != 1 {
		t.Fatalf("the old path is not listed as deleted with a restore action: %s", doc.Find(`[data-path="src"]`).Text())
	}
	added := doc.Find(`li.added > a.open-file[data-path="docs/old.txt"]`)
	if added.Length() != 1 || added.Find(".mark").Text() != "A" {
		t.Fatal("the new path is not listed as added")
	}
	if _, open := doc.Find(`li[data-path="src"] > details`).Attr("open"); !open {
		t.Fatal("an open folder came back folded")
	}
	if doc.Find(`li.dir.changed[data-path="docs"]`).Length() != 1 {
		t.Fatal("the new folder is not marked as changed inside")
	}

	// A folder moves whole, and a modified file shows M.
	if res := owner.put(base, "src/main.go", []byte("package main\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d", res.StatusCode)
	}
	doc = owner.treeFragment(base, "src")
	if doc.Find(`li.modified > a[data-path="src/main.go"] .mark`).Text() != "M" {
		t.Fatal("a modified file has no M mark")
	}
	// The link cannot move (a session keeps contents, not modes): the
	// folder holding it is refused whole.
	expectProblem(t, owner.post(base+"/rename", url.Values{"from": {"src"}, "to": {"lib"}}, jsonAccept), http.StatusConflict, "not_movable")
	if res := owner.post(base+"/revert", url.Values{"path": {"src/old.txt"}}, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("revert: %d %s", res.StatusCode, readBody(res))
	}
	if body, _, _ := owner.read(base, "src/old.txt"); body != "old\r\nbytes" {
		t.Fatalf("restored file reads %q", body)
	}
	if res := owner.post(base+"/rename", url.Values{"from": {"docs"}, "to": {"notes"}}, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("folder rename: %d %s", res.StatusCode, readBody(res))
	}
	if body, _, _ := owner.read(base, "notes/old.txt"); body != "old\r\nbytes" {
		t.Fatalf("moved folder's file reads %q", body)
	}
}

// TestExplorerHostile asks the explorer's endpoints for what an attacker
// would: names that climb out, reach .git, carry NUL or control bytes,
// collide, sit under a file; someone else's session; a forged request.
func TestExplorerHostile(t *testing.T) {
	h := newHarness(t)
	owner, id, base := explorable(t, h)

	tests := []struct {
		name, from, to string
		status         int
		reason         string
	}{
		{"parent", "README.md", "../README.md", http.StatusBadRequest, "bad_path"},
		{"climbing", "README.md", "src/../../x", http.StatusBadRequest, "bad_path"},
		{"absolute", "README.md", "/etc/cron.d/x", http.StatusBadRequest, "bad_path"},
		{"git", "README.md", ".git/hooks/post-checkout", http.StatusBadRequest, "bad_path"},
		{"git folder", "README.md", ".git", http.StatusBadRequest, "bad_path"},
		{"git case", "README.md", "src/.Git/config", http.StatusBadRequest, "bad_path"},
		{"NUL", "README.md", "a\x00b", http.StatusBadRequest, "bad_path"},
		{"newline", "README.md", "a\nb", http.StatusBadRequest, "bad_path"},
		{"carriage return", "README.md", "a\rb", http.StatusBadRequest, "bad_path"},
		{"escape", "README.md", "\x1b]0;x\x07", http.StatusBadRequest, "bad_path"},
		{"DEL", "README.md", "a\x7f", http.StatusBadRequest, "bad_path"},
		{"from outside", "../etc/passwd", "x", http.StatusBadRequest, "bad_path"},
		{"from git", ".git/config", "config", http.StatusBadRequest, "bad_path"},
		{"exists", "README.md", "src/main.go", http.StatusConflict, "exists"},
		{"a file's parent", "src/main.go", "src", http.StatusConflict, "exists"},
		{"under a file", "src/old.txt", "README.md/old.txt", http.StatusConflict, "not_a_folder"},
		{"into itself", "src", "src/deeper", http.StatusBadRequest, "into_itself"},
		{"missing", "nope", "yes", http.StatusNotFound, "not_found"},
		{"a link", "src/link", "link", http.StatusConflict, "not_movable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectProblem(t, owner.post(base+"/rename", url.Values{"from": {tt.from}, "to": {tt.to}}, jsonAccept), tt.status, tt.reason)
		})
	}
	for _, path := range []string{"../x", ".git/config", "a\x00b", "a\tb", "README.md/x"} {
		res := owner.post(base+"/new-file", url.Values{"path": {path}}, jsonAccept)
		if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusConflict {
			t.Errorf("new-file %q: %d", path, res.StatusCode)
		}
		res = owner.post(base+"/new-folder", url.Values{"path": {path}}, jsonAccept)
		if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusConflict {
			t.Errorf("new-folder %q: %d", path, res.StatusCode)
		}
	}
	expectProblem(t, owner.post(base+"/new-file", url.Values{"path": {"README.md"}}, jsonAccept), http.StatusConflict, "exists")
	expectProblem(t, owner.post(base+"/new-folder", url.Values{"path": {"src"}}, jsonAccept), http.StatusConflict, "exists")
	expectProblem(t, owner.post(base+"/delete-folder", url.Values{"path": {"../src"}}, jsonAccept), http.StatusBadRequest, "bad_path")
	expectProblem(t, owner.post(base+"/revert", url.Values{"path": {"/etc/passwd"}}, jsonAccept), http.StatusBadRequest, "bad_path")

	// Nothing of all that reached the session.
	if cs := decode[[]struct{ Path string }](t, owner.get(base+"/changes", jsonAccept)); len(cs) != 0 {
		t.Fatalf("refused requests changed %+v", cs)
	}

	// Someone else's session does not exist for them, admin or outsider.
	admin := h.user("admin2", false)
	outsider := h.user("outsider", true)
	owner.addMember(id, "admin2", "admin")
	for _, who := range []*client{admin, outsider} {
		for _, r := range []struct {
			path string
			form url.Values
		}{
			{"/rename", url.Values{"from": {"README.md"}, "to": {"stolen.md"}}},
			{"/new-file", url.Values{"path": {"planted.sh"}}},
			{"/new-folder", url.Values{"path": {"planted"}}},
			{"/delete-folder", url.Values{"path": {"src"}}},
			{"/revert", url.Values{"path": {"README.md"}}},
		} {
			expectProblem(t, who.post(base+r.path, r.form, jsonAccept), http.StatusNotFound, "not_found")
		}
	}
	// A request without the page's token is forged.
	for _, p := range []string{"/rename", "/new-file", "/new-folder", "/delete-folder", "/revert"} {
		form := url.Values{"from": {"README.md"}, "to": {"forged.md"}, "path": {"src"}}
		expectProblem(t, owner.postRaw(base+p, form, jsonAccept), http.StatusForbidden, "csrf")
	}
	if cs := decode[[]struct{ Path string }](t, owner.get(base+"/changes", jsonAccept)); len(cs) != 0 {
		t.Fatalf("other people's or forged requests changed %+v", cs)
	}
}

// TestExplorerNewAndDelete: a new file is empty and added, a second one at
// the same path is refused, a folder deletion leaves its base files as
// deletions in the tree, and the page unfolds the folders above ?path.
func TestExplorerNewAndDelete(t *testing.T) {
	h := newHarness(t)
	owner, _, base := explorable(t, h)

	res := owner.post(base+"/new-file", url.Values{"path": {"docs/new.md"}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("new-file: %d %s", res.StatusCode, readBody(res))
	}
	if body, _, status := owner.read(base, "docs/new.md"); status != http.StatusOK || body != "" {
		t.Fatalf("new file: %d %q", status, body)
	}
	expectProblem(t, owner.post(base+"/new-file", url.Values{"path": {"docs/new.md"}}, jsonAccept), http.StatusConflict, "exists")
	if res := owner.post(base+"/new-folder", url.Values{"path": {"docs/empty"}}, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("new-folder: %d %s", res.StatusCode, readBody(res))
	}
	// A checked folder stores nothing: git would not keep it.
	if cs := decode[[]struct{ Path string }](t, owner.get(base+"/changes", jsonAccept)); len(cs) != 1 || cs[0].Path != "docs/new.md" {
		t.Fatalf("changes after a new folder: %+v", cs)
	}

	if res := owner.put(base, "src/extra.txt", []byte("x\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d", res.StatusCode)
	}
	// The link inside does not stop a deletion (a deletion needs no mode).
	res = owner.post(base+"/delete-folder", url.Values{"path": {"src"}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("delete-folder: %d %s", res.StatusCode, readBody(res))
	}
	doc := owner.treeFragment(base, "src")
	for _, p := range []string{"src/main.go", "src/old.txt", "src/link"} {
		if doc.Find(`li.deleted[data-path="`+p+`"]`).Length() != 1 {
			t.Errorf("%s is not listed as deleted", p)
		}
	}
	if doc.Find(`[data-path="src/extra.txt"]`).Length() != 0 {
		t.Error("an added file of a deleted folder is still listed")
	}

	page := owner.page(base + "?path=" + url.QueryEscape("docs/new.md"))
	if _, open := page.Find(`#session-tree li[data-path="docs"] > details`).Attr("open"); !open {
		t.Fatal("the page does not unfold the folder of the file it opens")
	}
	if page.Find(`#session-tree a.open-file[data-path="docs/new.md"]`).Length() != 1 {
		t.Fatal("the page does not show the file it opens in the tree")
	}
	if page.Find(`script[src="/static/tree.js"]`).Length() != 1 || page.Find(`script[src="/static/explorer.js"]`).Length() != 1 {
		t.Fatal("the session page does not load the explorer")
	}
}
