package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"atelier/models"
	"atelier/search"
)

// Quick open takes space-separated terms in any order, each fuzzy, on the
// Code page and in a session (where the session's own files count too).
func TestQuickOpenSpaceSeparatedTerms(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("terms")
	if res := owner.upload(id, "src.tar.gz", tarGz(t, []entry{
		{name: "english/words.txt", body: "one\n"},
		{name: "english/grammar.txt", body: "two\n"},
		{name: "french/words.txt", body: "trois\n"},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	found := func(u string) []string {
		t.Helper()
		var out []string
		for _, m := range decode[findAnswer](t, owner.get(u, jsonAccept)).Matches {
			out = append(out, m.Path)
		}
		return out
	}
	project := "/projects/" + itoa(id) + "/code/find?q="
	for _, q := range []string{"eng wrd", "wrd eng"} {
		if got := found(project + url.QueryEscape(q)); len(got) != 1 || got[0] != "english/words.txt" {
			t.Errorf("the Code page's quick open of %q found %q, want english/words.txt alone", q, got)
		}
	}

	_, base := owner.session(id)
	if res := owner.put(base, "english/verbs.txt", []byte("run\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	for _, q := range []string{"eng vrb", "vrb eng"} {
		if got := found(base + "/find?q=" + url.QueryEscape(q)); len(got) != 1 || got[0] != "english/verbs.txt" {
			t.Errorf("the session's quick open of %q found %q, want the added english/verbs.txt alone", q, got)
		}
	}
	if got := found(base + "/find?q=" + url.QueryEscape("wrd eng")); len(got) != 1 || got[0] != "english/words.txt" {
		t.Errorf("the session's quick open of %q found %q, want english/words.txt alone", "wrd eng", got)
	}
}

type searchAnswer struct {
	Query   string `json:"query"`
	Matches []struct {
		Path   string   `json:"path"`
		Line   int      `json:"line"`
		Column int      `json:"column"`
		Text   string   `json:"text"`
		Ranges [][2]int `json:"ranges"`
	} `json:"matches"`
	Files     int  `json:"files"`
	Truncated bool `json:"truncated"`
	TimedOut  bool `json:"timedOut"`
	Partial   bool `json:"partial"`
}

// lines is the answer as "path:line:text", in its order.
func (a searchAnswer) lines() []string {
	out := []string{}
	for _, m := range a.Matches {
		out = append(out, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
	}
	return out
}

// gitGrep is git grep's own answer on the repository at commit, as
// "path:line:text" (with -z, so any name reads back whole).
func gitGrep(t *testing.T, repo, commit string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", repo, "grep", "-I", "-n", "-z"}, append(args, commit, "--")...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil && !(cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 1) {
		t.Fatalf("git grep %v: %v", args, err)
	}
	var got []string
	for _, rec := range strings.SplitAfter(string(out), "\n") {
		if rec == "" {
			continue
		}
		f := strings.SplitN(strings.TrimSuffix(rec, "\n"), "\x00", 3)
		got = append(got, strings.TrimPrefix(f[0], commit+":")+":"+f[1]+":"+strings.TrimSuffix(f[2], "\r"))
	}
	return got
}

// A search of the Code page finds exactly what git grep finds on the
// canonical repository, literal and regular expression, with case and
// without, but for what it leaves out by design: binary files, files over
// 1 MiB, lines past 100 of one file (told as truncated). The total cap
// holds, a hostile pattern is refused, and an outsider learns nothing.
func TestSearchMatchesGitGrep(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	member := h.user("member", false)
	outsider := h.user("outsider", false)
	id := owner.createProject("search")
	owner.addMember(id, "member", "member")
	var many strings.Builder
	for i := 1; i <= 150; i++ {
		fmt.Fprintf(&many, "needle number %d\n", i)
	}
	files := []entry{
		{name: "src/main.go", body: "package main\n\nfunc main() {\n\tprintln(\"needle\")\n}\n"},
		{name: "docs/Guide.md", body: "A Needle in a haystack\r\nno match here\r\nNEEDLE again, and needles\r\n"},
		{name: "weird name/ünï-needle.txt", body: "needle ü\nkeine\nneedle\n"},
		{name: "a-b.txt", body: "x\nneedle\n"},
		{name: "a.b", body: "needle\n"},
		{name: "bin/blob.bin", body: "needle\x00binary\n"},
		{name: "big.txt", body: strings.Repeat("needle in a big file\n", 60_000)},
		{name: "many/lines.txt", body: many.String()},
		{name: "funcs.go", body: "func alpha() {}\nfunc  beta(x int) {}\nvar f = func() {}\n"},
	}
	for i := 0; i < 12; i++ {
		files = append(files, entry{name: fmt.Sprintf("gen/f%02d.txt", i), body: strings.Repeat("x marks the spot\n", 100)})
	}
	if res := owner.upload(id, "src.tar.gz", tarGz(t, files), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	repo, commit := canonicalDir(t, h, id), canonicalOf(t, h, id)
	search := func(c *client, query string) searchAnswer {
		t.Helper()
		res := c.get("/projects/"+itoa(id)+"/code/search?"+query, jsonAccept)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("search %s: %d %s", query, res.StatusCode, readBody(res))
		}
		return decode[searchAnswer](t, res)
	}
	// byDesign drops what a search leaves out from git grep's answer.
	byDesign := func(lines []string) []string {
		var out []string
		perFile := map[string]int{}
		for _, l := range lines {
			path := l[:strings.Index(l, ":")]
			if path == "big.txt" {
				continue
			}
			if perFile[path]++; perFile[path] > 100 {
				continue
			}
			out = append(out, l)
		}
		return out
	}
	cases := []struct {
		query   string
		gitArgs []string
		cut     bool // a file has more than 100 matching lines
	}{
		{"q=needle", []string{"-i", "-F", "-e", "needle"}, true},
		{"q=needle&case=1", []string{"-F", "-e", "needle"}, true},
		{"q=NEEDLE&case=1", []string{"-F", "-e", "NEEDLE"}, false},
		{"q=" + url.QueryEscape(`func\s+\w+\(`) + "&regex=1&case=1", []string{"-E", "-e", `func[[:space:]]+[[:alnum:]_]+\(`}, false},
		{"q=" + url.QueryEscape(`needles?$`) + "&regex=1", []string{"-i", "-E", "-e", "needles?\r?$"}, false}, // git keeps a CR in the line
		{"q=" + url.QueryEscape("(x"), []string{"-F", "-e", "(x"}, false},                                     // a literal, though it looks like an expression
	}
	for _, c := range cases {
		got := search(member, c.query)
		want := byDesign(gitGrep(t, repo, commit, c.gitArgs...))
		if strings.Join(got.lines(), "\n") != strings.Join(want, "\n") {
			t.Errorf("search %s:\n%s\ngit grep %v (less what a search leaves out):\n%s", c.query, strings.Join(got.lines(), "\n"), c.gitArgs, strings.Join(want, "\n"))
		}
		if got.Truncated != c.cut || got.TimedOut {
			t.Errorf("search %s: truncated %v timed out %v, want truncated %v", c.query, got.Truncated, got.TimedOut, c.cut)
		}
	}
	// Marks: each match of a line, as byte offsets of its text.
	got := search(member, "q=needle")
	for _, m := range got.Matches {
		if m.Path != "docs/Guide.md" || m.Line != 3 {
			continue
		}
		if len(m.Ranges) != 2 || m.Text[m.Ranges[0][0]:m.Ranges[0][1]] != "NEEDLE" || m.Text[m.Ranges[1][0]:m.Ranges[1][1]] != "needle" || m.Column != 1 {
			t.Errorf("the marks of %q: %v, column %d", m.Text, m.Ranges, m.Column)
		}
	}

	capped := search(member, "q="+url.QueryEscape("marks the"))
	if len(capped.Matches) != 1000 || !capped.Truncated || capped.Files != 10 {
		t.Errorf("a search of 1,200 matching lines gave %d in %d files, truncated %v; want the cap of 1,000", len(capped.Matches), capped.Files, capped.Truncated)
	}

	expectProblem(t, member.get("/projects/"+itoa(id)+"/code/search?regex=1&q="+url.QueryEscape("[a-z]{999}[0-9]{3}"), jsonAccept), http.StatusBadRequest, "pattern_too_complex")
	expectProblem(t, member.get("/projects/"+itoa(id)+"/code/search?regex=1&q="+url.QueryEscape(strings.Repeat("(a|b)", 200)), jsonAccept), http.StatusBadRequest, "query_too_long")
	expectProblem(t, member.get("/projects/"+itoa(id)+"/code/search?regex=1&q="+url.QueryEscape("a(b"), jsonAccept), http.StatusBadRequest, "bad_pattern")
	expectProblem(t, member.get("/projects/"+itoa(id)+"/code/search?q=", jsonAccept), http.StatusBadRequest, "empty_query")
	expectProblem(t, outsider.get("/projects/"+itoa(id)+"/code/search?q=needle", jsonAccept), http.StatusNotFound, "not_found")
	if res := h.anonymous().get("/projects/"+itoa(id)+"/code/search?q=needle", jsonAccept); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous search: %d", res.StatusCode)
	}
}

// A pathological expression on a file of long lines answers within the
// search's bounds, and what it could not finish is said.
func TestSearchHostilePatternIsBounded(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("hostile")
	line := strings.Repeat("a", 200_000) + "\n"
	var files []entry
	for i := 0; i < 5; i++ {
		files = append(files, entry{name: fmt.Sprintf("long%d.txt", i), body: strings.Repeat(line, 5)})
	}
	if res := owner.upload(id, "src.tar.gz", tarGz(t, files), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	for _, q := range []string{`(a+)+b`, `(?:a?){30}a{30}x`, `(?i)[a-z]{40}[0-9]`, `(\w|a)*y`} {
		start := time.Now()
		res := owner.get("/projects/"+itoa(id)+"/code/search?regex=1&q="+url.QueryEscape(q), jsonAccept)
		took := time.Since(start)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", q, res.StatusCode, readBody(res))
		}
		got := decode[searchAnswer](t, res)
		// Its timeout is checked between lines, so the answer comes
		// within about a second of it on a quiet machine; three times
		// over says the timeout was honoured on a busy one too.
		if took > 3*search.Timeout || len(got.Matches) != 0 {
			t.Errorf("%s took %s and found %d lines (timed out %v)", q, took, len(got.Matches), got.TimedOut)
		}
	}
}

// A session's search sees the session's tree: its edited text (not the
// base's) with its own line numbers, the files it added, not those it
// deleted, in path order with the base's files; nobody else may search it.
func TestSearchSessionSeesItsEdits(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	other := h.user("other", false)
	id := owner.createProject("session-search")
	owner.addMember(id, "other", "admin")
	if res := owner.upload(id, "src.tar.gz", tarGz(t, []entry{
		{name: "a/kept.txt", body: "needle in kept\n"},
		{name: "b/edited.txt", body: "needle in the base\n"},
		{name: "c/deleted.txt", body: "needle to delete\n"},
		{name: "d/untouched.txt", body: "no match\n"},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	_, base := owner.session(id)
	if res := owner.put(base, "b/edited.txt", []byte("first line\nnow the needle is here\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.put(base, "bb/added.txt", []byte("an added needle\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	_, etag, _ := owner.read(base, "c/deleted.txt")
	if res := owner.do(http.MethodDelete, base+"/file?path=c/deleted.txt", nil, header{"X-CSRF-Token": owner.csrf, "If-Match": etag}); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	res := owner.get(base+"/search?q=needle", jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("search: %d %s", res.StatusCode, readBody(res))
	}
	got := decode[searchAnswer](t, res).lines()
	want := []string{"a/kept.txt:1:needle in kept", "b/edited.txt:2:now the needle is here", "bb/added.txt:1:an added needle"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the session's search found\n%q\nwant\n%q", got, want)
	}
	expectProblem(t, other.get(base+"/search?q=needle", jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, owner.get(base+"/search?q=(&regex=1", jsonAccept), http.StatusBadRequest, "bad_pattern")
}

// A Local project's search reads its folder through its root: nothing
// behind a symlink out of it, no binary file, no file over 1 MiB.
func TestSearchLocal(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	c := h.user("owner", false)
	folder := filepath.Join(t.TempDir(), "work")
	os.MkdirAll(filepath.Join(folder, "src", "deep"), 0o755)
	os.WriteFile(filepath.Join(folder, "src", "deep", "widget.py"), []byte("print('root:')\nroot: here\n"), 0o644)
	os.WriteFile(filepath.Join(folder, "blob.bin"), []byte("root:\x00"), 0o644)
	os.WriteFile(filepath.Join(folder, "big.txt"), bytes.Repeat([]byte("root: big\n"), 110_000), 0o644)
	os.Symlink("/etc", filepath.Join(folder, "etc"))
	os.Symlink("/etc/passwd", filepath.Join(folder, "passwd"))
	res := c.post("/projects", url.Values{"name": {"local"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	got := decode[searchAnswer](t, c.get("/projects/"+itoa(id)+"/code/search?q="+url.QueryEscape("root:")+"&case=1", jsonAccept)).lines()
	want := []string{"src/deep/widget.py:1:print('root:')", "src/deep/widget.py:2:root: here"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the Local search found\n%q\nwant\n%q", got, want)
	}
}

// For a page that reads events, each file comes as its own message of
// rendered HTML (the path, each line's number, the match marked) and the
// summary last; a plain browser gets the Code page with the results in the
// viewer.
func TestSearchAnswersEventsAndThePage(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("events")
	if res := owner.upload(id, "src.tar.gz", tarGz(t, []entry{
		{name: "one.txt", body: "a <needle> here\n"},
		{name: "two/three.txt", body: "x\nneedle\n"},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	u := "/projects/" + itoa(id) + "/code/search?q=needle"
	res := owner.get(u, header{"HX-Request": "true", "Accept": "text/html, text/event-stream"})
	body := readBody(res)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	var messages []*goquery.Document
	for _, m := range strings.Split(strings.TrimSpace(body), "\n\n") {
		var html strings.Builder
		for _, line := range strings.Split(m, "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				t.Fatalf("a line of a message that is not data: %q", line)
			}
			html.WriteString(data + "\n")
		}
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(html.String()))
		if err != nil {
			t.Fatal(err)
		}
		messages = append(messages, doc)
	}
	if len(messages) != 3 {
		t.Fatalf("%d messages, want a file each and the summary:\n%s", len(messages), body)
	}
	first := messages[0]
	link := first.Find("ol.search-lines a")
	if first.Find("h3.search-path a").AttrOr("href", "") != "/projects/"+itoa(id)+"/code?path=one.txt" ||
		link.AttrOr("href", "") != "/projects/"+itoa(id)+"/code?path=one.txt#L1" || link.Find(".ln").Text() != "1" ||
		link.Find("mark").Text() != "needle" || link.Find("code").Text() != "a <needle> here" {
		h, _ := first.Html()
		t.Fatalf("the first file's message: %s", h)
	}
	if s := messages[2].Find("p.search-summary"); s.AttrOr("data-matches", "") != "2" || s.AttrOr("data-files", "") != "2" {
		h, _ := messages[2].Html()
		t.Fatalf("the summary: %s", h)
	}

	page := owner.page(u)
	if page.Find("#viewer h3.search-path").Length() != 2 || page.Find("#viewer mark").Length() != 2 ||
		page.Find(`#search-form input[name=q]`).AttrOr("value", "") != "needle" || page.Find("#viewer p.search-summary").Length() != 1 {
		t.Fatalf("the Code page with the results: %d files, %d marks", page.Find("#viewer h3.search-path").Length(), page.Find("#viewer mark").Length())
	}
}
