package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// oddNames are file names that are also URL syntax: each must open itself,
// never a 404 and never another file.
var oddNames = []string{"b+c.txt", "a&path=README.md", "x#y.txt", "50%.txt", "sp ace.txt", "ü.txt"}

// oddFolder holds a file too, so that folder links are tried as well.
const oddFolder = "d&x #1"

// contentOf is what the project's file at p holds: its own name.
func contentOf(p string) string { return "content of " + p + "\n" }

// importOddNames makes a project whose files have oddNames (and README.md,
// which a confused link would open instead) and returns its id.
func importOddNames(t *testing.T, owner *client) int64 {
	t.Helper()
	id := owner.createProject("odd-names")
	if res := owner.upload(id, "odd.tar.gz", tarGz(t, oddEntries()), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	return id
}

// fragment GETs path as htmx would and parses the answer.
func (c *client) fragment(path string) *goquery.Document {
	c.h.t.Helper()
	res := c.get(path, header{"HX-Request": "true"})
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("GET %s (htmx): %d %s", path, res.StatusCode, readBody(res))
	}
	doc, err := goquery.NewDocumentFromReader(res.Body)
	if err != nil {
		c.h.t.Fatal(err)
	}
	return doc
}

// attr reads an attribute the test needs, failing when it is missing.
func attr(t *testing.T, s *goquery.Selection, name string) string {
	t.Helper()
	v, ok := s.Attr(name)
	if !ok || v == "" {
		html, _ := goquery.OuterHtml(s)
		t.Fatalf("no %s on %s", name, html)
	}
	return v
}

// Every link the Code page and an edit session render for a file with an
// odd name leads to that file: the tree's page link, its htmx link and
// pushed address, the viewer's download, a folder's htmx link, the session
// tree and the diff of a change.
func TestLinksCarryFileNames(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := importOddNames(t, owner)
	code := "/projects/" + itoa(id) + "/code"

	doc := owner.page(code)
	folder := doc.Find(`.tree-pane summary`).FilterFunction(func(_ int, s *goquery.Selection) bool { return s.AttrOr("data-path", "") == oddFolder })
	if folder.Length() != 1 {
		t.Fatalf("no folder %q in the tree", oddFolder)
	}
	inside := owner.fragment(attr(t, folder, "hx-get")).Find(`li.file a`)
	if inside.Length() != 1 || inside.AttrOr("data-path", "") != oddFolder+"/in+side.txt" {
		t.Fatalf("the folder's link lists %d files: %q", inside.Length(), inside.AttrOr("data-path", ""))
	}

	links := map[string]*goquery.Selection{}
	doc.Find(`.tree-pane li.file a`).Each(func(_ int, a *goquery.Selection) { links[a.AttrOr("data-path", "")] = a })
	links[oddFolder+"/in+side.txt"] = inside
	for _, name := range append(oddNames, oddFolder+"/in+side.txt") {
		a := links[name]
		if a == nil {
			t.Fatalf("no tree link for %q", name)
		}
		href, hxGet, pushed := attr(t, a, "href"), attr(t, a, "hx-get"), attr(t, a, "hx-push-url")
		if pushed != href {
			t.Errorf("%q: pushes %q but links %q", name, pushed, href)
		}
		page := owner.page(href)
		viewer := page.Find(`#viewer article.file`)
		if viewer.AttrOr("data-path", "") != name || !strings.Contains(viewer.Text(), strings.TrimSpace(contentOf(name))) {
			t.Errorf("%q: the page at %q shows %q: %q", name, href, viewer.AttrOr("data-path", ""), viewer.Text())
		}
		file := owner.fragment(hxGet).Find(`article.file`)
		if file.AttrOr("data-path", "") != name || !strings.Contains(file.Text(), strings.TrimSpace(contentOf(name))) {
			t.Errorf("%q: the viewer at %q shows %q", name, hxGet, file.AttrOr("data-path", ""))
		}
		download := attr(t, file.Find(`a.download`), "href")
		res := owner.get(download, nil)
		if body := readBody(res); res.StatusCode != http.StatusOK || body != contentOf(name) ||
			!strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") {
			t.Errorf("%q: download %q answered %d %q (%s)", name, download, res.StatusCode, body, res.Header.Get("Content-Disposition"))
		}
	}

	// The edit session: its tree links name the file the page opens, and
	// each change's diff link shows that file's diff.
	_, base := owner.session(id)
	sessionTree := owner.page(base).Find(`#session-tree`)
	for _, name := range oddNames {
		a := sessionTree.Find(`a.open-file`).FilterFunction(func(_ int, s *goquery.Selection) bool { return s.AttrOr("data-path", "") == name })
		href := attr(t, a, "href")
		opens, _ := owner.page(href).Find(`#session`).Attr("data-open-path")
		if opens != name {
			t.Errorf("%q: the session page at %q opens %q", name, href, opens)
		}
		if res := owner.put(base, name, []byte("edited "+contentOf(name)), nil); res.StatusCode != http.StatusNoContent {
			t.Fatalf("save %q: %d %s", name, res.StatusCode, readBody(res))
		}
	}
	sessionFolder := sessionTree.Find(`summary`).FilterFunction(func(_ int, s *goquery.Selection) bool { return s.AttrOr("data-path", "") == oddFolder })
	if got := owner.fragment(attr(t, sessionFolder, "hx-get")).Find(`a.open-file`).AttrOr("data-path", ""); got != oddFolder+"/in+side.txt" {
		t.Errorf("the session's folder link lists %q", got)
	}
	changes := owner.fragment(base + "/changes").Find(`ul.changes li`)
	if changes.Length() != len(oddNames) {
		t.Fatalf("%d changes, want %d", changes.Length(), len(oddNames))
	}
	changes.Each(func(_ int, li *goquery.Selection) {
		name := li.AttrOr("data-path", "")
		a := li.Find("a")
		if attr(t, a, "href") != attr(t, a, "hx-get") {
			t.Errorf("%q: diff links differ", name)
		}
		diff := owner.fragment(attr(t, a, "hx-get")).Find(`article.diff`)
		if diff.AttrOr("data-path", "") != name || !strings.Contains(diff.Text(), "+edited content of "+name) {
			t.Errorf("%q: the diff link shows %q: %s", name, diff.AttrOr("data-path", ""), diff.Text())
		}
	})
}

// oddEntries is the archive of importOddNames.
func oddEntries() []entry {
	entries := []entry{{name: "README.md", body: contentOf("README.md")}, {name: oddFolder + "/in+side.txt", body: contentOf(oddFolder + "/in+side.txt")}}
	for _, n := range oddNames {
		entries = append(entries, entry{name: n, body: contentOf(n)})
	}
	return entries
}
