package server

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"atelier/models"
)

type findAnswer struct {
	Query   string `json:"query"`
	Matches []struct {
		Path      string `json:"path"`
		Positions []int  `json:"positions"`
	} `json:"matches"`
	Partial bool `json:"partial"`
}

// Quick open ranks a project's paths for members, answers JSON and the
// finder's list, stays bounded, and tells an outsider the project does not
// exist.
func TestQuickOpenContainer(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	member := h.user("member", false)
	outsider := h.user("outsider", false)
	id := owner.createProject("finder")
	owner.addMember(id, "member", "member")
	files := []entry{
		{name: "handlers/code.go", body: "package handlers\n"},
		{name: "handlers/codeImport.go", body: "package handlers\n"},
		{name: "views/templates/pages/code.html", body: "<p>code</p>\n"},
		{name: "README.md", body: "# finder\n"},
	}
	for i := 0; i < 60; i++ {
		files = append(files, entry{name: fmt.Sprintf("gen/f%02d.txt", i), body: "x\n"})
	}
	if res := owner.upload(id, "src.tar.gz", tarGz(t, files), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	find := "/projects/" + itoa(id) + "/code/find?q="

	got := decode[findAnswer](t, member.get(find+"hcode", jsonAccept))
	if len(got.Matches) < 2 || got.Matches[0].Path != "handlers/code.go" || got.Matches[1].Path != "handlers/codeImport.go" {
		t.Fatalf("hcode found %+v", got.Matches)
	}
	if p := got.Matches[0].Positions; len(p) != 5 || p[0] != 0 {
		t.Fatalf("positions %v", p)
	}

	res := member.get(find+url.QueryEscape("c.html"), header{"HX-Request": "true"})
	doc, err := goquery.NewDocumentFromReader(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("fragment: %d %v", res.StatusCode, err)
	}
	link := doc.Find(`#find-results [role="option"] a`).First()
	href, _ := link.Attr("href")
	if link.AttrOr("data-path", "") != "views/templates/pages/code.html" ||
		href != "/projects/"+itoa(id)+"/code?path=views%2Ftemplates%2Fpages%2Fcode.html" ||
		link.Find("mark").Length() == 0 || doc.Find("header.top").Length() != 0 {
		t.Fatalf("fragment link %q %q marks %d", link.AttrOr("data-path", ""), href, link.Find("mark").Length())
	}

	if got := decode[findAnswer](t, member.get(find+"&limit=1000", jsonAccept)); len(got.Matches) != 50 {
		t.Fatalf("an empty query with limit 1000 gave %d paths, want the bound of 50", len(got.Matches))
	}
	if got := decode[findAnswer](t, member.get(find+"zzzz", jsonAccept)); len(got.Matches) != 0 {
		t.Fatalf("zzzz found %+v", got.Matches)
	}
	expectProblem(t, member.get(find+strings.Repeat("a", 129), jsonAccept), http.StatusBadRequest, "query_too_long")
	expectProblem(t, member.get(find+"%ff", jsonAccept), http.StatusBadRequest, "bad_query")
	expectProblem(t, outsider.get(find+"code", jsonAccept), http.StatusNotFound, "not_found")
	if res := h.anonymous().get(find+"code", jsonAccept); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous quick open: %d", res.StatusCode)
	}
}

// A Local project's quick open walks its folder and never lists what lies
// behind a symlink out of it.
func TestQuickOpenLocal(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	c := h.user("owner", false)
	folder := filepath.Join(t.TempDir(), "work")
	os.MkdirAll(filepath.Join(folder, "src", "deep"), 0o755)
	os.WriteFile(filepath.Join(folder, "src", "deep", "widget.py"), []byte("print('hi')\n"), 0o644)
	os.Symlink("/etc", filepath.Join(folder, "etc"))
	res := c.post("/projects", url.Values{"name": {"local"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	got := decode[findAnswer](t, c.get("/projects/"+itoa(id)+"/code/find?q=wdg", jsonAccept))
	if len(got.Matches) != 1 || got.Matches[0].Path != "src/deep/widget.py" {
		t.Fatalf("wdg found %+v", got.Matches)
	}
	if got := decode[findAnswer](t, c.get("/projects/"+itoa(id)+"/code/find?q=passwd", jsonAccept)); len(got.Matches) != 0 {
		t.Fatalf("quick open followed a symlink out of the folder: %+v", got.Matches)
	}
}
