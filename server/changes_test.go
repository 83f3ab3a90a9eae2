package server

import (
	"context"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/models"
	"atelier/projects"
)

type changeJSON struct {
	ID         int64             `json:"id"`
	ChangeID   int64             `json:"changeId"`
	Status     string            `json:"status"`
	WaitReason *string           `json:"waitReason"`
	Base       string            `json:"base"`
	Commit     string            `json:"commit"`
	Paths      []string          `json:"paths"`
	Evidence   []models.Evidence `json:"evidence"`
}

// runPipeline runs the verifier of h's server until the test ends, as the
// server's start does.
func runPipeline(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.app.Changes.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (c *client) submit(base, message string) *http.Response {
	return c.post(base+"/submit", url.Values{"message": {message}}, jsonAccept)
}

func (c *client) change(id, cid int64) changeJSON {
	c.h.t.Helper()
	res := c.get("/projects/"+itoa(id)+"/changes/"+itoa(cid), jsonAccept)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("change %d: %d %s", cid, res.StatusCode, readBody(res))
	}
	return decode[changeJSON](c.h.t, res)
}

// waitChange waits until the change is in one of statuses (and, for a
// composed one, waits for something), or fails.
func (c *client) waitChange(id, cid int64, statuses ...string) changeJSON {
	c.h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ch := c.change(id, cid)
		for _, s := range statuses {
			if ch.Status == s && (s != models.ChangeComposed || ch.WaitReason != nil) {
				return ch
			}
		}
		if time.Now().After(deadline) {
			c.h.t.Fatalf("change %d is %s (waits %v), want one of %v", cid, ch.Status, ch.WaitReason, statuses)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *client) act(id, cid int64, action string) *http.Response {
	return c.post("/projects/"+itoa(id)+"/changes/"+itoa(cid)+"/"+action, nil, jsonAccept)
}

// approveAndRelease carries a change waiting for approval to canonical.
func (c *client) approveAndRelease(id, cid int64) changeJSON {
	c.h.t.Helper()
	c.waitChange(id, cid, models.ChangeComposed)
	if res := c.act(id, cid, "approve"); res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("approve %d: %d %s", cid, res.StatusCode, readBody(res))
	}
	res := c.act(id, cid, "release")
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("release %d: %d %s", cid, res.StatusCode, readBody(res))
	}
	return decode[changeJSON](c.h.t, res)
}

// editFile saves one file from the Code page as a one-file Change.
func (c *client) editFile(id int64, path, content string) int64 {
	c.h.t.Helper()
	p, err := c.h.store.ProjectByID(context.Background(), id)
	if err != nil {
		c.h.t.Fatal(err)
	}
	res := c.post("/projects/"+itoa(id)+"/code/edit", url.Values{"path": {path}, "content": {content},
		"base": {*p.CanonicalCommit}, "message": {"edit " + path}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		c.h.t.Fatalf("edit %s: %d %s", path, res.StatusCode, readBody(res))
	}
	return decode[changeJSON](c.h.t, res).ChangeID
}

func canonicalOf(t *testing.T, h *harness, id int64) string {
	t.Helper()
	p, err := h.store.ProjectByID(context.Background(), id)
	if err != nil || p.CanonicalCommit == nil {
		t.Fatalf("canonical of %d: %v", id, err)
	}
	return *p.CanonicalCommit
}

// gitOut runs git in the canonical repository (or dir) of the test.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return string(out)
}

func canonicalDir(t *testing.T, h *harness, id int64) string {
	return filepath.Join(h.cfg.GitDir(), projects.CanonicalName(id)+".git")
}

// forkDir is the person's workspace fork, where their Changes' commits are.
func forkDir(t *testing.T, h *harness, id int64, user string) string {
	return filepath.Join(h.cfg.GitDir(), "ws-"+itoa(id)+"-"+itoa(userID(t, h, user))+".git")
}

// Canonical advanced on other files: the submit lands on the new canonical
// with both changes. Canonical changed an edited file: 409 stale_base with
// exactly those paths, and the session stays open.
func TestSubmitComposesOnCanonical(t *testing.T) {
	h := newHarness(t)
	runPipeline(t, h)
	owner, id := editable(t, h)
	eve := h.user("eve", false)
	owner.addMember(id, "eve", "admin")

	sess, base := owner.session(id)
	owner.put(base, "README.md", []byte("# Owner's readme\n"), nil)

	// Canonical moves on another file meanwhile.
	other := eve.editFile(id, "src/main.go", "package main\n\nfunc main() { println(2) }\n")
	eve.approveAndRelease(id, other)
	moved := canonicalOf(t, h, id)
	if moved == sess.BaseCommit {
		t.Fatal("canonical did not move")
	}

	res := owner.submit(base, "Rewrite the readme")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", res.StatusCode, readBody(res))
	}
	cid := decode[changeJSON](t, res).ChangeID
	ch := owner.change(id, cid)
	if ch.Base != moved || len(ch.Paths) != 1 || ch.Paths[0] != "README.md" {
		t.Fatalf("change %+v, want base %s", ch, moved)
	}
	dir := canonicalDir(t, h, id)
	ws := forkDir(t, h, id, "owner")
	if got := gitIn(t, ws, "show", ch.Commit+":README.md"); got != "# Owner's readme\n" {
		t.Fatalf("README in the change: %q", got)
	}
	if got := gitIn(t, ws, "show", ch.Commit+":src/main.go"); !strings.Contains(got, "println(2)") {
		t.Fatalf("canonical's edit is not in the change: %q", got)
	}
	if parent := strings.TrimSpace(gitIn(t, ws, "rev-parse", ch.Commit+"^")); parent != moved {
		t.Fatalf("parent %s, want %s", parent, moved)
	}
	if author := gitIn(t, ws, "log", "-1", "--format=%an|%s", ch.Commit); author != "owner|Rewrite the readme\n" {
		t.Fatalf("author and message %q", author)
	}
	// The session ended as submitted, with its event.
	if res := owner.get(base, jsonAccept); res.StatusCode != http.StatusGone {
		t.Fatalf("the submitted session answers %d", res.StatusCode)
	}
	evs, _ := h.store.EventsOf(context.Background(), id, "code.session.submitted")
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"changeId": `+itoa(cid)) {
		t.Fatalf("submitted events %d: %s", len(evs), evs[0].Data)
	}
	// A repeat finds the same change.
	res = owner.submit(base, "again")
	if res.StatusCode != http.StatusOK || decode[changeJSON](t, res).ChangeID != cid {
		t.Fatalf("repeat submit: %d", res.StatusCode)
	}
	owner.approveAndRelease(id, cid)
	if got := gitIn(t, dir, "show", "main:README.md"); got != "# Owner's readme\n" {
		t.Fatalf("canonical README %q", got)
	}

	// Now canonical changes a file the next session edits.
	_, base2 := owner.session(id)
	owner.put(base2, "src/main.go", []byte("package main // mine\n"), nil)
	owner.put(base2, "notes.txt", []byte("notes\n"), header{"If-None-Match": "*"})
	clash := eve.editFile(id, "src/main.go", "package main // eve's\n")
	eve.approveAndRelease(id, clash)
	res = owner.submit(base2, "")
	p := expectProblem(t, res, http.StatusConflict, "stale_base")
	_ = p
	stale := decode[struct {
		Paths []string `json:"paths"`
	}](t, owner.submit(base2, ""))
	if len(stale.Paths) != 1 || stale.Paths[0] != "src/main.go" {
		t.Fatalf("stale paths %v", stale.Paths)
	}
	if res := owner.get(base2, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("the refused session answers %d, want it open", res.StatusCode)
	}
	if n := changeCount(t, h, id); n != 3 {
		t.Fatalf("%d changes, want 3 (none for the refused submit)", n)
	}
}

func userID(t *testing.T, h *harness, name string) int64 {
	t.Helper()
	u, err := h.store.UserByName(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

// changeCount counts a project's changes.
func changeCount(t *testing.T, h *harness, id int64) int {
	t.Helper()
	cs, err := h.store.ChangesOf(context.Background(), id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

// Ten submits of one session at once: one Change, one commit.
func TestConcurrentSubmitsMakeOneChange(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	owner.put(base, "README.md", []byte("# Once\n"), nil)

	var wg sync.WaitGroup
	ids := make([]int64, 10)
	statuses := make([]int, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := owner.submit(base, "once")
			statuses[i] = res.StatusCode
			if res.StatusCode == http.StatusCreated || res.StatusCode == http.StatusOK {
				ids[i] = decode[changeJSON](t, res).ChangeID
			}
		}()
	}
	wg.Wait()
	created := 0
	for i := range 10 {
		if statuses[i] == http.StatusCreated {
			created++
		} else if statuses[i] != http.StatusOK {
			t.Fatalf("submit %d: %d", i, statuses[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("submits found changes %v", ids)
		}
	}
	if created != 1 {
		t.Fatalf("%d submits created a change, want 1 (%v)", created, statuses)
	}
	if n := changeCount(t, h, id); n != 1 {
		t.Fatalf("%d changes", n)
	}
	ws := forkDir(t, h, id, "owner")
	if refs := strings.Fields(gitIn(t, ws, "for-each-ref", "--format=%(objectname)", "refs/changes/")); len(refs) != 1 {
		t.Fatalf("change commits %v, want one", refs)
	}
}

// Members see changes read-only; outsiders get 404; only owners and
// admins act, and only the author withdraws.
func TestChangesAccess(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	molly := h.user("molly", false)
	owner.addMember(id, "molly", "member")
	eve := h.user("eve", false)
	owner.addMember(id, "eve", "admin")
	stranger := h.user("stranger", false)
	cid := eve.editFile(id, "README.md", "# eve\n")

	pp := "/projects/" + itoa(id)
	for _, path := range []string{pp + "/changes", pp + "/changes/" + itoa(cid), pp + "/settings"} {
		if res := molly.get(path, jsonAccept); res.StatusCode != http.StatusOK {
			t.Errorf("member GET %s: %d", path, res.StatusCode)
		}
		expectProblem(t, stranger.get(path, jsonAccept), http.StatusNotFound, "not_found")
	}
	expectProblem(t, molly.act(id, cid, "approve"), http.StatusForbidden, "forbidden")
	expectProblem(t, molly.act(id, cid, "release"), http.StatusForbidden, "forbidden")
	expectProblem(t, molly.act(id, cid, "withdraw"), http.StatusForbidden, "not_author")
	expectProblem(t, stranger.act(id, cid, "approve"), http.StatusNotFound, "not_found")
	expectProblem(t, molly.post(pp+"/settings", url.Values{"checkCommand": {"true"}}, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, molly.post(pp+"/code/edit", url.Values{"path": {"README.md"}, "content": {"x"}}, jsonAccept), http.StatusForbidden, "forbidden")
	// Without the CSRF token, nothing moves.
	if res := owner.postRaw(pp+"/changes/"+itoa(cid)+"/withdraw", url.Values{}, jsonAccept); res.StatusCode != http.StatusForbidden {
		t.Fatalf("withdraw without CSRF: %d", res.StatusCode)
	}
	// Not verified yet: no release.
	expectProblem(t, owner.act(id, cid, "release"), http.StatusConflict, "not_verified")
	expectProblem(t, owner.act(id, cid, "withdraw"), http.StatusForbidden, "not_author")
	if res := eve.act(id, cid, "withdraw"); res.StatusCode != http.StatusOK {
		t.Fatalf("author withdraws: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, eve.act(id, cid, "withdraw"), http.StatusConflict, "finished")
	// Another project's change is not found through this one.
	other := owner.createProject("other")
	expectProblem(t, owner.get("/projects/"+itoa(other)+"/changes/"+itoa(cid), jsonAccept), http.StatusNotFound, "not_found")
}
