package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/testrig/miniotest"
)

type sessionJSON struct {
	ID         string `json:"id"`
	BaseCommit string `json:"baseCommit"`
}

// editable makes a project with a few files and returns the owner and the
// project id.
func editable(t *testing.T, h *harness) (*client, int64) {
	t.Helper()
	owner := h.user("owner", false)
	id := owner.createProject("edit-me")
	res := owner.upload(id, "base.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: "# Base\n"},
		{name: "src/main.go", body: "package main\n\nfunc main() {}\n"},
		{name: "src/old.txt", body: "old\n"},
	}), jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	return owner, id
}

func (c *client) openSession(id int64) (sessionJSON, int) {
	c.h.t.Helper()
	res := c.post("/projects/"+itoa(id)+"/sessions", nil, jsonAccept)
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	s := decode[sessionJSON](c.h.t, res)
	if res.Header.Get("Location") != "/projects/"+itoa(id)+"/sessions/"+s.ID {
		c.h.t.Fatalf("Location %q", res.Header.Get("Location"))
	}
	return s, res.StatusCode
}

// session opens (or finds) the caller's session and returns it with its
// URL.
func (c *client) session(id int64) (sessionJSON, string) {
	c.h.t.Helper()
	s, _ := c.openSession(id)
	return s, "/projects/" + itoa(id) + "/sessions/" + s.ID
}

// addMember gives username role in the project, as the members panel does.
func (c *client) addMember(id int64, username, role string) {
	c.h.t.Helper()
	res := c.post("/projects/"+itoa(id)+"/members", url.Values{"username": {username}, "role": {role}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("add %s as %s: %d %s", username, role, res.StatusCode, readBody(res))
	}
}

// put saves a file the way the editor does.
func (c *client) put(base, path string, body []byte, hdr header) *http.Response {
	h := header{"X-CSRF-Token": c.csrf, "Accept": "application/json"}
	for k, v := range hdr {
		h[k] = v
	}
	return c.do(http.MethodPut, base+"/file?path="+url.QueryEscape(path), bytes.NewReader(body), h)
}

func (c *client) read(base, path string) (string, string, int) {
	res := c.get(base+"/file?path="+url.QueryEscape(path), jsonAccept)
	return readBody(res), res.Header.Get("ETag"), res.StatusCode
}

func TestOpenSession(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	other := h.user("other", false)
	owner.addMember(id, "other", "admin")

	// 20 concurrent opens by one person: one session.
	var wg sync.WaitGroup
	ids := make(chan string, 20)
	created := make(chan int, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, status := owner.openSession(id)
			ids <- s.ID
			created <- status
		}()
	}
	wg.Wait()
	close(ids)
	close(created)
	seen := map[string]bool{}
	for s := range ids {
		seen[s] = true
	}
	news := 0
	for st := range created {
		if st == http.StatusCreated {
			news++
		}
	}
	if len(seen) != 1 || news != 1 {
		t.Fatalf("20 concurrent opens gave sessions %v with %d created", seen, news)
	}
	theirs, _ := other.openSession(id)
	if seen[theirs.ID] {
		t.Fatal("two people share a session")
	}
	var mine string
	for s := range seen {
		mine = s
	}
	if !strings.HasPrefix(mine, "edit_") {
		t.Fatalf("session id %q", mine)
	}
	// The fork exists beside canonical, named from the id.
	if _, err := os.Stat(filepath.Join(h.cfg.GitDir(), "edit-"+strings.TrimPrefix(mine, "edit_")+".git")); err != nil {
		t.Fatalf("fork: %v", err)
	}
	// Opening started nothing else and recorded an event.
	evs, err := h.store.EventsOf(context.Background(), id, "code.session.opened")
	if err != nil || len(evs) != 2 {
		t.Fatalf("opened events %d %v", len(evs), err)
	}
}

// A session is its owner's alone: anyone else, a project admin too, gets
// 404 for every URL of it; a member cannot open one.
func TestSessionIsPrivate(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	admin := h.user("admin2", false)
	member := h.user("member", false)
	outsider := h.user("outsider", true)
	owner.addMember(id, "admin2", "admin")
	owner.addMember(id, "member", "member")
	_, base := owner.session(id)

	expectProblem(t, member.post("/projects/"+itoa(id)+"/sessions", nil, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, outsider.post("/projects/"+itoa(id)+"/sessions", nil, jsonAccept), http.StatusNotFound, "not_found")

	type req struct{ method, path string }
	urls := []req{
		{http.MethodGet, base}, {http.MethodGet, base + "/tree"}, {http.MethodGet, base + "/file?path=README.md"},
		{http.MethodPut, base + "/file?path=README.md"}, {http.MethodDelete, base + "/file?path=README.md"},
		{http.MethodGet, base + "/changes"}, {http.MethodGet, base + "/diff?path=README.md"},
		{http.MethodPost, base + "/discard"}, {http.MethodPost, base + "/keepalive"},
	}
	for _, who := range []*client{admin, member, outsider} {
		for _, r := range urls {
			res := who.do(r.method, r.path, strings.NewReader("x"), header{"X-CSRF-Token": who.csrf, "Accept": "application/json"})
			expectProblem(t, res, http.StatusNotFound, "not_found")
		}
	}
	// After all that, the owner's session is untouched.
	if body, _, status := owner.read(base, "README.md"); status != http.StatusOK || body != "# Base\n" {
		t.Fatalf("owner read: %d %q", status, body)
	}
	// A session id of another project, or a made-up one, is not found either.
	expectProblem(t, owner.get("/projects/"+itoa(id)+"/sessions/edit_00000000000000000000000000000000", jsonAccept), http.StatusNotFound, "not_found")
}

func TestSessionFiles(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)

	// Bytes are kept exactly: CRLF, no final newline, non-UTF-8 text.
	for _, content := range []string{"one\r\ntwo\r\n", "no final newline", "latin1 \xe9t\xe9\n", ""} {
		res := owner.put(base, "exact.txt", []byte(content), nil)
		if res.StatusCode != http.StatusNoContent || res.Header.Get("ETag") == "" {
			t.Fatalf("save %q: %d %s", content, res.StatusCode, readBody(res))
		}
		if got, etag, _ := owner.read(base, "exact.txt"); got != content || etag != res.Header.Get("ETag") {
			t.Fatalf("round trip %q → %q (etag %s vs %s)", content, got, etag, res.Header.Get("ETag"))
		}
	}

	// The rules, each with its status and reason.
	for _, bad := range []string{"../x", "a/../../x", "/etc/passwd", ".git/config", "a/.git/HEAD", "a/./b", "a\x00b", strings.Repeat("d/", 2100) + "x"} {
		expectProblem(t, owner.put(base, bad, []byte("x"), nil), http.StatusBadRequest, "bad_path")
	}
	expectProblem(t, owner.put(base, "bin.dat", []byte("a\x00b"), nil), http.StatusUnsupportedMediaType, "binary")
	expectProblem(t, owner.put(base, "big.txt", bytes.Repeat([]byte("a"), editsession.MaxFileBytes+1), nil), http.StatusRequestEntityTooLarge, "too_large")
	if res := owner.put(base, "limit.txt", bytes.Repeat([]byte("a"), editsession.MaxFileBytes), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("a file of exactly the limit: %d %s", res.StatusCode, readBody(res))
	}

	// Two tabs: the second save with the first's stale ETag is refused.
	_, etag, _ := owner.read(base, "README.md")
	if res := owner.put(base, "README.md", []byte("# Tab one\n"), header{"If-Match": etag}); res.StatusCode != http.StatusNoContent {
		t.Fatalf("first tab: %d", res.StatusCode)
	}
	expectProblem(t, owner.put(base, "README.md", []byte("# Tab two\n"), header{"If-Match": etag}), http.StatusPreconditionFailed, "stale")
	expectProblem(t, owner.put(base, "README.md", []byte("# New?\n"), header{"If-None-Match": "*"}), http.StatusPreconditionFailed, "stale")
	if got, _, _ := owner.read(base, "README.md"); got != "# Tab one\n" {
		t.Fatalf("the stale save overwrote: %q", got)
	}

	// Saving the base content again removes the edit.
	owner.put(base, "README.md", []byte("# Base\n"), nil)
	// Delete a base file; create one.
	_, etag, _ = owner.read(base, "src/old.txt")
	if res := owner.do(http.MethodDelete, base+"/file?path=src/old.txt", nil, header{"X-CSRF-Token": owner.csrf, "If-Match": etag}); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	if _, _, status := owner.read(base, "src/old.txt"); status != http.StatusNotFound {
		t.Fatalf("a deleted file reads %d", status)
	}
	owner.put(base, "src/new/added.go", []byte("package added\n"), header{"If-None-Match": "*"})
	owner.put(base, "src/main.go", []byte("package main\n\nfunc main() { println(1) }\n"), nil)

	changes := decode[[]editsession.Change](t, owner.get(base+"/changes", jsonAccept))
	want := map[string]string{"exact.txt": "added", "limit.txt": "added", "src/old.txt": "deleted", "src/new/added.go": "added", "src/main.go": "modified"}
	if len(changes) != len(want) {
		t.Fatalf("changes %+v", changes)
	}
	for _, c := range changes {
		if want[c.Path] != c.Status {
			t.Fatalf("change %+v, want %s", c, want[c.Path])
		}
	}
	// The tree marks them, with the added folder.
	type entry struct {
		Name, Type, Status string
		ChangedInside      bool
	}
	srcList := decode[[]entry](t, owner.get(base+"/tree?path=src", jsonAccept))
	marks := map[string]entry{}
	for _, e := range srcList {
		marks[e.Name] = e
	}
	if marks["new"].Type != "dir" || !marks["new"].ChangedInside || marks["old.txt"].Status != "deleted" || marks["main.go"].Status != "modified" {
		t.Fatalf("marks %+v", srcList)
	}
	diff := readBody(owner.get(base+"/diff?path=src/main.go", nil))
	if !strings.Contains(diff, "--- a/src/main.go") || !strings.Contains(diff, "-func main() {}") || !strings.Contains(diff, "+func main() { println(1) }") {
		t.Fatalf("diff:\n%s", diff)
	}
}

func TestSessionPathLimit(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	for i := 0; i < editsession.MaxPaths; i++ {
		if res := owner.put(base, "many/f"+itoa(int64(i))+".txt", []byte("x"), nil); res.StatusCode != http.StatusNoContent {
			t.Fatalf("path %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
	}
	expectProblem(t, owner.put(base, "many/one-too-many.txt", []byte("x"), nil), http.StatusConflict, "too_many_paths")
	expectProblem(t, owner.do(http.MethodDelete, base+"/file?path=README.md", nil, header{"X-CSRF-Token": owner.csrf, "Accept": "application/json"}), http.StatusConflict, "too_many_paths")
	if res := owner.put(base, "many/f7.txt", []byte("changed again"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("saving an already-changed path at the limit: %d", res.StatusCode)
	}
}

// sessionLeftovers counts what an ended session must not leave: its fork and
// its edit rows.
func sessionLeftovers(t *testing.T, h *harness, sid string) (forkExists bool, rows int64) {
	t.Helper()
	_, err := os.Stat(filepath.Join(h.cfg.GitDir(), "edit-"+strings.TrimPrefix(sid, "edit_")+".git"))
	edits, cerr := h.store.SessionFiles(context.Background(), sid)
	if cerr != nil {
		t.Fatal(cerr)
	}
	return err == nil, int64(len(edits))
}

func TestSessionEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		end    func(h *harness, owner *client, id int64, base string)
	}{
		{"idle", "idle", func(h *harness, _ *client, _ int64, _ string) { h.clock.Advance(10*time.Minute + time.Second) }},
		{"max age", "max_age", func(h *harness, owner *client, _ int64, base string) {
			// Busy all along, it still ends two hours after the open.
			for i := 0; i < 12; i++ {
				h.clock.Advance(9*time.Minute + 50*time.Second)
				if res := owner.post(base+"/keepalive", nil, jsonAccept); res.StatusCode != http.StatusOK {
					t.Errorf("keepalive %d: %d", i, res.StatusCode)
				}
			}
			h.clock.Advance(2 * time.Minute) // 120 minutes after the open
		}},
		{"revoked", "revoked", func(h *harness, owner *client, id int64, _ string) {
			// A second owner takes the first's right to edit.
			boss := h.user("boss", false)
			if res := owner.post("/projects/"+itoa(id)+"/members", url.Values{"username": {"boss"}, "role": {"owner"}}, jsonAccept); res.StatusCode != http.StatusAccepted {
				t.Fatalf("offer: %d %s", res.StatusCode, readBody(res))
			}
			if res := boss.post("/projects/"+itoa(id)+"/invitation/accept", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
				t.Fatalf("accept: %d %s", res.StatusCode, readBody(res))
			}
			boss.addMember(id, "owner", "member")
		}},
		{"discarded", "discarded", func(h *harness, owner *client, _ int64, base string) {
			if res := owner.post(base+"/discard", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
				t.Fatalf("discard: %d", res.StatusCode)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			owner, id := editable(t, h)
			s, base := owner.session(id)
			owner.put(base, "src/main.go", []byte("edited\n"), nil)
			if fork, rows := sessionLeftovers(t, h, s.ID); !fork || rows != 1 {
				t.Fatalf("before the end: fork %v, rows %d", fork, rows)
			}
			tc.end(h, owner, id, base)
			expectProblem(t, owner.get(base+"/file?path=src/main.go", jsonAccept), http.StatusGone, tc.reason)
			if fork, rows := sessionLeftovers(t, h, s.ID); fork || rows != 0 {
				t.Fatalf("after the end: fork %v, rows %d", fork, rows)
			}
			evs, err := h.store.EventsOf(context.Background(), id, "code.session.closed")
			var data struct{ Session, Reason string }
			if err != nil || len(evs) != 1 || json.Unmarshal(evs[0].Data, &data) != nil || data.Reason != tc.reason || data.Session != s.ID {
				t.Fatalf("closed events %+v %v", evs, err)
			}
			// Canonical never moved: an edit session does not touch it.
			if tc.reason != "revoked" {
				if next, _ := owner.openSession(id); next.ID == s.ID {
					t.Fatal("a new open returned the ended session")
				}
			}
		})
	}
}

// The idle warning's clock: the deadline moves with activity, not with
// reads of the page's status.
func TestSessionIdleDeadline(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	h.clock.Advance(9 * time.Minute)
	// Reading the changes list is not activity.
	owner.get(base+"/changes", jsonAccept)
	h.clock.Advance(30 * time.Second)
	res := owner.post(base+"/keepalive", nil, jsonAccept)
	ka := decode[map[string]string](t, res)
	deadline, err := time.Parse(time.RFC3339Nano, ka["idleDeadline"])
	if err != nil || !deadline.Equal(h.clock.Now().Add(10*time.Minute).Truncate(time.Millisecond)) {
		t.Fatalf("deadline %v (%v), want now + 10 min", ka["idleDeadline"], err)
	}
	if res.Header.Get("X-Session-Idle-Deadline") == "" || res.Header.Get("X-Server-Now") == "" {
		t.Fatal("the deadline headers are missing")
	}
	h.clock.Advance(9*time.Minute + 59*time.Second)
	if _, _, status := owner.read(base, "README.md"); status != http.StatusOK {
		t.Fatalf("a session kept alive ended: %d", status)
	}
}

func TestSweepAndMaintenance(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	s, _ := owner.openSession(id)
	owner.put("/projects/"+itoa(id)+"/sessions/"+s.ID, "a.txt", []byte("a"), nil)
	ctx := context.Background()
	if n, err := h.app.EditSessions.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("a live session was swept: %d %v", n, err)
	}
	h.clock.Advance(11 * time.Minute)
	if n, err := h.app.EditSessions.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep ended %d, %v", n, err)
	}
	if fork, rows := sessionLeftovers(t, h, s.ID); fork || rows != 0 {
		t.Fatalf("after the sweep: fork %v, rows %d", fork, rows)
	}
	// An orphaned fork (a crash between fork and row) goes at maintenance.
	orphan := filepath.Join(h.cfg.GitDir(), "edit-"+strings.Repeat("ab", 16)+".git")
	if err := os.MkdirAll(filepath.Join(orphan, "objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	live, _ := owner.openSession(id)
	if err := h.app.EditSessions.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatal("the orphaned fork survived maintenance")
	}
	if fork, _ := sessionLeftovers(t, h, live.ID); !fork {
		t.Fatal("maintenance removed a live session's fork")
	}
}

func TestSessionSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	owner.put(base, "src/main.go", []byte("kept\r\nacross"), nil)
	owner.put(base, "fresh.txt", []byte("new\n"), nil)

	restarted, err := New(context.Background(), h.cfg, h.store, h.app.log, h.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Bus.Close()
	defer restarted.Events.Close()
	h.srv.Config.Handler = restarted.Handler
	for path, want := range map[string]string{"src/main.go": "kept\r\nacross", "fresh.txt": "new\n", "README.md": "# Base\n"} {
		if got, _, status := owner.read(base, path); status != http.StatusOK || got != want {
			t.Fatalf("%s after restart: %d %q", path, status, got)
		}
	}
}

// Deleting a project removes its forks and every session row.
func TestDeleteProjectRemovesSessions(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	s, _ := owner.openSession(id)
	owner.put("/projects/"+itoa(id)+"/sessions/"+s.ID, "a.txt", []byte("a"), nil)
	if res := owner.del("/projects/"+itoa(id), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	if fork, rows := sessionLeftovers(t, h, s.ID); fork || rows != 0 {
		t.Fatalf("after deleting the project: fork %v, rows %d", fork, rows)
	}
	if _, err := h.store.SessionByID(context.Background(), s.ID); err == nil {
		t.Fatal("the session row outlived its project")
	}
}

// With the object store down the session still reads its base through git.
func TestSessionReadChainWithoutObjectStore(t *testing.T) {
	minio := miniotest.Start(t)
	h := newHarness(t, func(c *Config) { c.S3 = minio.Config("atelier") })
	owner, id := editable(t, h)
	_, base := owner.session(id)
	owner.put(base, "README.md", []byte("# Edited\n"), nil)
	minio.Kill()
	for path, want := range map[string]string{"README.md": "# Edited\n", "src/main.go": "package main\n\nfunc main() {}\n"} {
		if got, _, status := owner.read(base, path); status != http.StatusOK || got != want {
			t.Fatalf("%s with the store down: %d %q", path, status, got)
		}
	}
	if es := decode[[]map[string]any](t, owner.get(base+"/tree?path=src", jsonAccept)); len(es) != 2 {
		t.Fatalf("tree with the store down: %v", es)
	}
}
