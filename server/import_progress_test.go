package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// manyFiles is an archive of n files of size bytes each.
func manyFiles(t *testing.T, n, size int) ([]byte, int64) {
	t.Helper()
	entries := make([]entry, n)
	for i := range entries {
		body := fmt.Sprintf("file %05d\n", i)
		body += strings.Repeat("x", size-len(body))
		entries[i] = entry{name: fmt.Sprintf("pkg%02d/file%05d.txt", i%40, i), body: body}
	}
	return tarGz(t, entries), int64(n * size)
}

type importLine struct {
	Progress *struct {
		Phase string `json:"phase"`
		Files int    `json:"files"`
		Bytes int64  `json:"bytes"`
	} `json:"progress"`
	Done *struct {
		Commit string `json:"commit"`
		Files  int    `json:"files"`
		Bytes  int64  `json:"bytes"`
	} `json:"done"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// watchImport posts an archive asking for the progress stream and returns
// its lines.
func watchImport(t *testing.T, c *client, id int64, name string, archive []byte) (*http.Response, []importLine) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("archive", name)
	fw.Write(archive)
	mw.Close()
	res := c.do(http.MethodPost, "/projects/"+itoa(id)+"/import", &body,
		header{"Content-Type": mw.FormDataContentType(), "Accept": "application/x-ndjson, application/json", "X-CSRF-Token": c.csrf})
	defer res.Body.Close()
	var lines []importLine
	if res.StatusCode != http.StatusOK {
		return res, nil
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var l importLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return res, lines
}

// An import asked for its progress answers it line by line on the request:
// files written as they go in, then committing and publishing, then the
// summary; a bad archive ends the stream with its reason, and a refusal
// before any work keeps its status.
func TestImportProgressStream(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	member := h.user("member", false)
	id := owner.createProject("progress")
	owner.addMember(id, "member", "member")

	archive, total := manyFiles(t, 3000, 1000)
	res, lines := watchImport(t, owner, id, "many.tar.gz", archive)
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("stream: %d %q", res.StatusCode, ct)
	}
	var phases []string
	lastFiles := -1
	for _, l := range lines[:len(lines)-1] {
		if l.Progress == nil {
			t.Fatalf("a line before the end is not progress: %+v", l)
		}
		if n := len(phases); n == 0 || phases[n-1] != l.Progress.Phase {
			phases = append(phases, l.Progress.Phase)
		}
		if l.Progress.Files < lastFiles {
			t.Fatalf("files went back from %d to %d", lastFiles, l.Progress.Files)
		}
		lastFiles = l.Progress.Files
	}
	if strings.Join(phases, " ") != "writing committing publishing" {
		t.Fatalf("phases %v", phases)
	}
	done := lines[len(lines)-1].Done
	if done == nil || done.Files != 3000 || done.Bytes != total || len(done.Commit) != 40 {
		t.Fatalf("summary %+v, want 3000 files of %d bytes", done, total)
	}
	if got := *owner.project(id).CanonicalCommit; got != done.Commit {
		t.Fatalf("canonical is %s, the summary says %s", got, done.Commit)
	}

	_, lines = watchImport(t, owner, id, "bad.zip", []byte("PK\x03\x04 this is no zip at all"))
	last := lines[len(lines)-1]
	if last.Reason != "bad_archive" || last.Error == "" || last.Done != nil {
		t.Fatalf("bad archive ended with %+v", last)
	}

	res, _ = watchImport(t, member, id, "many.tar.gz", archive)
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("a member's import: %d, want 403 before any progress", res.StatusCode)
	}
}

// In the browser a large import shows its progress under the form and ends
// with the summary; a bad archive's error shows in the same place, the form
// and its chosen file kept.
func TestBrowserImportProgress(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "ann-password", false); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	archive, _ := manyFiles(t, 3000, 1000)
	large := filepath.Join(dir, "large.tar.gz")
	bad := filepath.Join(dir, "bad.zip")
	os.WriteFile(large, archive, 0o644)
	os.WriteFile(bad, []byte("PK\x03\x04 this is no zip at all"), 0o644)

	ctx := browser(t)
	err := do(ctx, signIn(h, "ann", "ann-password"))
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := do(ctx,
		chromedp.Navigate(h.srv.URL+"/projects/new"),
		typeInto(`input[name=name]`, "imports"),
		chromedp.Submit(chromedp.CSS(`input[name=name]`)),
		shows(`form[data-import] input[type=file]`),
	); err != nil {
		t.Fatalf("create: %v", err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Sscanf(loc[strings.LastIndex(loc, "/")+1:], "%d", &id)

	err = do(ctx,
		chromedp.SetUploadFiles(chromedp.CSS(`form[data-import] input[type=file]`), []string{large}),
		chromedp.Click(chromedp.CSS(`form[data-import] button[type=submit]`)),
		untilPage(`document.getElementById("import-status").dataset.state === "done"`),
	)
	if err != nil {
		t.Fatalf("large import: %v", err)
	}
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const s = document.getElementById("import-status"); return s.dataset.phases + "|" + s.textContent })()`))
	if err != nil {
		t.Fatal(err)
	}
	phases, text, _ := strings.Cut(state, "|")
	for _, want := range []string{"writing", "publishing", "done"} {
		if !strings.Contains(" "+phases+" ", " "+want+" ") {
			t.Errorf("the page never showed %q (it showed %q)", want, phases)
		}
	}
	if !strings.Contains(text, "Imported 3,000 files (2.9 MiB) as commit ") {
		t.Errorf("summary %q", text)
	}

	err = do(ctx,
		chromedp.SetUploadFiles(chromedp.CSS(`form[data-import] input[type=file]`), []string{bad}),
		chromedp.Click(chromedp.CSS(`form[data-import] button[type=submit]`)),
		untilPage(`document.getElementById("import-status").dataset.reason === "bad_archive"`),
		showsText(`#import-status`, "Bad archive"),
		untilPage(`document.querySelector('form[data-import] input[type=file]').files.length === 1 && location.pathname.endsWith("/projects/`+itoa(id)+`")`),
	)
	if err != nil {
		t.Fatalf("bad archive: %v", err)
	}
}
