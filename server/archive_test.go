package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linkChain is a chain of links that each stay inside the project as text
// but climb one folder more each when followed on disk: "l16" is "/" from
// any folder a server runs in (and within the system's 40 links per
// lookup), and the file below it names the sentinel.
func linkChain(sentinel string) (entries []entry, file string) {
	entries = []entry{{name: "README.md", body: "hello\n"}, {name: "l0", link: "."}}
	for i := 1; i <= 16; i++ {
		entries = append(entries, entry{name: fmt.Sprintf("l%d", i), link: fmt.Sprintf("l%d/..", i-1)})
	}
	file = "l16/" + strings.TrimPrefix(sentinel, "/") + "/pwned"
	return append(entries, entry{name: file, body: "root was here\n"}), file
}

// Archives whose links climb out once followed, as a tar and as a zip, are
// refused with bad_archive naming the entry; nothing is written where the
// links lead and canonical does not move.
func TestImportRefusesLinkChains(t *testing.T) {
	h := newHarness(t)
	c := h.user("owner", false)
	id := c.createProject("chains")
	before := *c.project(id).CanonicalCommit
	sentinel := t.TempDir()

	chain, file := linkChain(sentinel)
	throughLink := []entry{{name: "here", link: "."}, {name: "deep/there", link: "../here/.."}}
	for _, v := range []struct {
		name, naming string
		archive      []byte
	}{
		{"chain.tar.gz", file, tarGz(t, chain)},
		{"chain.zip", file, zipOf(t, chain)},
		{"chain-links-only.tar.gz", "l1", tarGz(t, chain[:len(chain)-1])},
		{"chain-links-only.zip", "l1", zipOf(t, chain[:len(chain)-1])},
		{"through-a-link.tar.gz", "deep/there", tarGz(t, throughLink)},
		{"through-a-link.zip", "deep/there", zipOf(t, throughLink)},
	} {
		p := expectProblem(t, c.upload(id, v.name, v.archive, jsonAccept), http.StatusBadRequest, "bad_archive")
		if !strings.Contains(p.Error, fmt.Sprintf("%q", v.naming)) {
			t.Errorf("%s: the refusal does not name %q: %s", v.name, v.naming, p.Error)
		}
	}
	if _, err := os.Lstat(filepath.Join(sentinel, "pwned")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the chain reached the sentinel folder: %v", err)
	}
	if after := *c.project(id).CanonicalCommit; after != before {
		t.Fatal("a refused import moved canonical")
	}
}

// Links that stay inside import as links, from a tar and from a zip.
func TestImportKeepsInwardLinks(t *testing.T) {
	h := newHarness(t)
	c := h.user("owner", false)
	inward := []entry{
		{name: "docs/guide.md", body: "# Guide\n"},
		{name: "guide", link: "docs/guide.md"},
		{name: "docs/top", link: ".."},
		{name: "again", link: "docs/top/docs/guide.md"},
	}
	for name, archive := range map[string][]byte{"inward.tar.gz": tarGz(t, inward), "inward.zip": zipOf(t, inward)} {
		id := c.createProject(strings.TrimSuffix(strings.TrimSuffix(name, ".gz"), ".tar"))
		if res := c.upload(id, name, archive, jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("%s: import: %d %s", name, res.StatusCode, readBody(res))
		}
		kinds := map[string]string{}
		for _, e := range decode[[]struct{ Name, Type string }](t, c.get("/projects/"+itoa(id)+"/code/tree", jsonAccept)) {
			kinds[e.Name] = e.Type
		}
		for _, e := range decode[[]struct{ Name, Type string }](t, c.get("/projects/"+itoa(id)+"/code/tree?path=docs", jsonAccept)) {
			kinds["docs/"+e.Name] = e.Type
		}
		want := map[string]string{"docs": "dir", "guide": "symlink", "again": "symlink", "docs/guide.md": "file", "docs/top": "symlink"}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Errorf("%s: tree %v, want %v", name, kinds, want)
		}
	}
}
