package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"atelier/models"
	"atelier/projects"
	"atelier/testrig/wait"
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
	var ch changeJSON
	wait.ForNil(c.h.t, 2*wait.Long, fmt.Sprintf("change %d to be one of %v", cid, statuses), func() error {
		ch = c.change(id, cid)
		for _, s := range statuses {
			if ch.Status == s && (s != models.ChangeComposed || ch.WaitReason != nil) {
				return nil
			}
		}
		return fmt.Errorf("it is %s (waits %v)", ch.Status, ch.WaitReason)
	})
	return ch
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

// editFile saves one file as a one-file Change, as a script does: the
// base is the commit the Code page's JSON names.
func (c *client) editFile(id int64, path, content string) int64 {
	c.h.t.Helper()
	res := c.get("/projects/"+itoa(id)+"/code", jsonAccept)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("the code of %d: %d %s", id, res.StatusCode, readBody(res))
	}
	head := decode[struct {
		Head struct{ Commit string } `json:"head"`
	}](c.h.t, res).Head.Commit
	res = c.post("/projects/"+itoa(id)+"/code/edit", url.Values{"path": {path}, "content": {content},
		"base": {head}, "message": {"edit " + path}}, jsonAccept)
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
	owner.approveAndRelease(id, other) // with two who may, not its author
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
	eve.approveAndRelease(id, cid)
	if got := gitIn(t, dir, "show", "main:README.md"); got != "# Owner's readme\n" {
		t.Fatalf("canonical README %q", got)
	}

	// Now canonical changes a file the next session edits.
	_, base2 := owner.session(id)
	owner.put(base2, "src/main.go", []byte("package main // mine\n"), nil)
	owner.put(base2, "notes.txt", []byte("notes\n"), header{"If-None-Match": "*"})
	clash := eve.editFile(id, "src/main.go", "package main // eve's\n")
	owner.approveAndRelease(id, clash)
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

	// Rebase: a new session on the current canonical with the edits
	// canonical did not touch; the clashing one stays behind.
	res = owner.post(base2+"/rebase", nil, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("rebase: %d %s", res.StatusCode, readBody(res))
	}
	rebased := decode[struct {
		ID         string   `json:"id"`
		BaseCommit string   `json:"baseCommit"`
		Dropped    []string `json:"dropped"`
	}](t, res)
	if rebased.BaseCommit != canonicalOf(t, h, id) || len(rebased.Dropped) != 1 || rebased.Dropped[0] != "src/main.go" {
		t.Fatalf("rebased %+v", rebased)
	}
	base3 := "/projects/" + itoa(id) + "/sessions/" + rebased.ID
	if got, _, _ := owner.read(base3, "notes.txt"); got != "notes\n" {
		t.Fatalf("the carried edit reads %q", got)
	}
	if got, _, _ := owner.read(base3, "src/main.go"); got != "package main // eve's\n" {
		t.Fatalf("the dropped path reads %q, want canonical's", got)
	}
	if res := owner.submit(base3, "notes"); res.StatusCode != http.StatusCreated {
		t.Fatalf("submit after the rebase: %d %s", res.StatusCode, readBody(res))
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

	// Ten connections open beforehand, and the ten requests let go at
	// once, so they really meet on the server.
	racer := *owner
	racer.http = &http.Client{Jar: owner.http.Jar, Transport: &http.Transport{MaxIdleConnsPerHost: 10}}
	var warm sync.WaitGroup
	for range 10 {
		warm.Add(1)
		go func() { defer warm.Done(); readBody(racer.get("/healthz", nil)) }()
	}
	warm.Wait()
	start := make(chan struct{})
	var wg sync.WaitGroup
	ids := make([]int64, 10)
	statuses := make([]int, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res := racer.submit(base, "once")
			statuses[i] = res.StatusCode
			if res.StatusCode == http.StatusCreated || res.StatusCode == http.StatusOK {
				ids[i] = decode[changeJSON](t, res).ChangeID
			}
		}()
	}
	close(start)
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
	// Not even an unreferenced one: only one submit composed.
	authored := 0
	for _, line := range strings.Split(gitIn(t, ws, "cat-file", "--batch-all-objects", "--batch-check=%(objecttype) %(objectname)"), "\n") {
		if oid, ok := strings.CutPrefix(line, "commit "); ok && gitIn(t, ws, "log", "-1", "--format=%an", oid) == "owner\n" {
			authored++
		}
	}
	if authored != 1 {
		t.Fatalf("%d commits by the person in the fork, want 1", authored)
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

func (c *client) setCheck(id int64, command string) {
	c.h.t.Helper()
	res := c.post("/projects/"+itoa(id)+"/settings", url.Values{"checkCommand": {command}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("set check %q: %d %s", command, res.StatusCode, readBody(res))
	}
}

// A failing check leaves canonical alone and the change failed with its
// evidence; a passing one is released, and the Code page then shows the new
// tree, read from the object store.
func TestCheckDecidesRelease(t *testing.T) {
	needRoot(t)
	checkDecidesRelease(t, newHarness(t))
}

// The same with the check's command in a pod of its own.
func TestCheckDecidesReleaseInAPod(t *testing.T) {
	needRoot(t)
	checkDecidesRelease(t, newHarness(t, onKube(t)))
}

func checkDecidesRelease(t *testing.T, h *harness) {
	runPipeline(t, h)
	owner, id := editable(t, h)
	owner.setCheck(id, `grep -q good README.md || { echo "README is not good" >&2; exit 3; }`)
	before := canonicalOf(t, h, id)

	_, base := owner.session(id)
	owner.put(base, "README.md", []byte("# bad\n"), nil)
	res := owner.submit(base, "bad readme")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", res.StatusCode, readBody(res))
	}
	bad := decode[changeJSON](t, res).ChangeID
	ch := owner.waitChange(id, bad, models.ChangeFailed)
	if len(ch.Evidence) != 1 || ch.Evidence[0].Passed || *ch.Evidence[0].ExitCode != 3 ||
		!strings.Contains(*ch.Evidence[0].OutputTail, "README is not good") || ch.Evidence[0].CommitSHA != ch.Commit {
		t.Fatalf("evidence of the failed check: %+v", ch.Evidence)
	}
	expectProblem(t, owner.act(id, bad, "release"), http.StatusConflict, "not_verified")
	if canonicalOf(t, h, id) != before {
		t.Fatal("a failed change moved canonical")
	}

	_, base = owner.session(id)
	owner.put(base, "README.md", []byte("# good\n"), nil)
	good := decode[changeJSON](t, owner.submit(base, "good readme")).ChangeID
	ch = owner.waitChange(id, good, models.ChangeVerified)
	if len(ch.Evidence) != 1 || !ch.Evidence[0].Passed || *ch.Evidence[0].ExitCode != 0 {
		t.Fatalf("evidence of the passing check: %+v", ch.Evidence)
	}
	res = owner.act(id, good, "release")
	if res.StatusCode != http.StatusOK || decode[changeJSON](t, res).Status != models.ChangeReleased {
		t.Fatalf("release: %d", res.StatusCode)
	}
	if canonicalOf(t, h, id) != ch.Commit {
		t.Fatal("canonical is not the released commit")
	}
	if _, err := h.store.PublishedRoot(context.Background(), ch.Commit); err != nil {
		t.Fatalf("the released tree is not in the object store: %v", err)
	}
	// Git no longer knows canonical: what the page shows comes from the store.
	dir := canonicalDir(t, h, id)
	if err := os.Rename(filepath.Join(dir, "objects"), filepath.Join(dir, "objects.away")); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(filepath.Join(dir, "objects.away"), filepath.Join(dir, "objects"))
	doc := owner.page("/projects/" + itoa(id) + "/code?path=README.md&view=source")
	if got := doc.Find(".highlight").Text(); !strings.Contains(got, "# good") {
		t.Fatalf("the Code page shows %q", got)
	}
	evs, _ := h.store.EventsOf(context.Background(), id, "change.released")
	if len(evs) != 1 {
		t.Fatalf("%d change.released events", len(evs))
	}
	if evs, _ := h.store.EventsOf(context.Background(), id, "change.failed"); len(evs) != 1 {
		t.Fatalf("%d change.failed events", len(evs))
	}
}

// A server stopped while a check runs leaves the change verifying; the next
// start verifies it again, and it ends verified or failed.
func TestVerificationSurvivesRestart(t *testing.T) {
	needRoot(t)
	verificationSurvivesRestart(t, newHarness(t))
}

func TestVerificationSurvivesRestartInAPod(t *testing.T) {
	needRoot(t)
	verificationSurvivesRestart(t, newHarness(t, onKube(t)))
}

func verificationSurvivesRestart(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	owner.setCheck(id, "sleep 3; exit 0")

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.app.Changes.Run(ctx); close(done) }()
	_, base := owner.session(id)
	owner.put(base, "README.md", []byte("# restart\n"), nil)
	cid := decode[changeJSON](t, owner.submit(base, "")).ChangeID
	owner.waitChange(id, cid, models.ChangeVerifying)
	wait.For(t, wait.Long, "the check's command to run", func() bool {
		if h.cfg.Kube != nil {
			return sandboxRuns(h, "sleep 3")
		}
		for _, pid := range processesWith("sleep\x003") {
			if fi, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil && fi.Sys().(*syscall.Stat_t).Uid == h.app.Runtime.CheckUID() {
				return true
			}
		}
		return false
	})
	stop() // the server goes away mid-check
	<-done
	if ch := owner.change(id, cid); ch.Status != models.ChangeVerifying || len(ch.Evidence) != 0 {
		t.Fatalf("after the stop: %s with %d evidence", ch.Status, len(ch.Evidence))
	}

	// The next start: nothing is kept in memory; the stop let go of the
	// check's claim, and the verifier finds the change due in the database.
	next := h.app.Changes
	ctx, stop = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { next.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	ch := owner.waitChange(id, cid, models.ChangeVerified, models.ChangeFailed)
	if ch.Status != models.ChangeVerified || len(ch.Evidence) != 1 {
		t.Fatalf("after the restart: %s with %d evidence", ch.Status, len(ch.Evidence))
	}
}

// Two releases racing on one project: canonical only ever points at a
// commit with evidence, and neither released change is lost.
func TestRacingReleases(t *testing.T) {
	h := newHarness(t)
	runPipeline(t, h)
	owner, id := editable(t, h)
	a := owner.editFile(id, "README.md", "# A\n")
	b := owner.editFile(id, "src/old.txt", "B\n")
	for _, cid := range []int64{a, b} {
		owner.waitChange(id, cid, models.ChangeComposed)
		if res := owner.act(id, cid, "approve"); res.StatusCode != http.StatusOK {
			t.Fatalf("approve: %d", res.StatusCode)
		}
	}
	var wg sync.WaitGroup
	codes := map[int64]int{}
	var mu sync.Mutex
	for _, cid := range []int64{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := owner.act(id, cid, "release")
			mu.Lock()
			codes[cid] = res.StatusCode
			mu.Unlock()
		}()
	}
	wg.Wait()
	first, second := a, b
	if codes[a] != http.StatusOK {
		first, second = b, a
	}
	if codes[first] != http.StatusOK || codes[second] != http.StatusAccepted {
		t.Fatalf("release answers %v, want one 200 and one 202", codes)
	}
	chFirst := owner.change(id, first)
	if chFirst.Status != models.ChangeReleased || canonicalOf(t, h, id) != chFirst.Commit {
		t.Fatalf("first: %+v, canonical %s", chFirst, canonicalOf(t, h, id))
	}
	// The second was composed again on the first and needs new evidence.
	chSecond := owner.waitChange(id, second, models.ChangeComposed)
	if chSecond.Base != chFirst.Commit || len(chSecond.Evidence) != 1 || chSecond.Evidence[0].CommitSHA == chSecond.Commit {
		t.Fatalf("second after the race: %+v", chSecond)
	}
	expectProblem(t, owner.act(id, second, "release"), http.StatusConflict, "not_verified")
	owner.approveAndRelease(id, second)
	final := canonicalOf(t, h, id)
	dir := canonicalDir(t, h, id)
	if got := gitIn(t, dir, "show", "main:README.md") + gitIn(t, dir, "show", "main:src/old.txt"); got != "# A\nB\n" {
		t.Fatalf("canonical lost a released change: %q", got)
	}
	// Every commit canonical went through since the import has evidence.
	for _, commit := range strings.Fields(gitIn(t, dir, "rev-list", "--first-parent", final, "^"+chFirst.Base)) {
		found := false
		for _, cid := range []int64{a, b} {
			for _, e := range owner.change(id, cid).Evidence {
				found = found || (e.CommitSHA == commit && e.Passed)
			}
		}
		if !found {
			t.Fatalf("canonical went through %s without evidence", commit)
		}
	}
	// The database refuses a verified change without evidence, whoever
	// writes the row.
	err := h.store.Exec(context.Background(), "UPDATE changes SET commit_sha = repeat('a', 40) WHERE id = $1", second)
	if !strings.Contains(errString(err), "changes_status_transition") && !strings.Contains(errString(err), "changes_verified_needs_evidence") {
		t.Fatalf("rewriting a released change's commit: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Exact bytes: CRLF, no final newline and non-UTF-8 text arrive in
// canonical byte for byte.
func TestSubmitKeepsExactBytes(t *testing.T) {
	h := newHarness(t)
	runPipeline(t, h)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	files := map[string]string{
		"crlf.txt":       "one\r\ntwo\r\n",
		"no-newline.txt": "no final newline",
		"latin1.txt":     "caf\xe9 cr\xe8me\n",
		"README.md":      "",
	}
	for p, content := range files {
		if res := owner.put(base, p, []byte(content), nil); res.StatusCode != http.StatusNoContent {
			t.Fatalf("save %s: %d", p, res.StatusCode)
		}
	}
	cid := decode[changeJSON](t, owner.submit(base, "bytes")).ChangeID
	owner.approveAndRelease(id, cid)
	dir := canonicalDir(t, h, id)
	for p, content := range files {
		if got := gitIn(t, dir, "cat-file", "blob", "main:"+p); got != content {
			t.Errorf("%s in canonical: %q, want %q", p, got, content)
		}
	}
}

// A Local folder that is a git repository: a clean one has its branch and
// files moved by the release; a dirty one makes the change wait with
// dirty_worktree, and nothing moves.
func TestReleaseIntoLocalFolder(t *testing.T) {
	h := newHarness(t)
	runPipeline(t, h)
	root := h.user("root", true)
	folder := filepath.Join(t.TempDir(), "local")
	os.MkdirAll(folder, 0o755)
	os.WriteFile(filepath.Join(folder, "README.md"), []byte("# Local\n"), 0o644)
	os.WriteFile(filepath.Join(folder, "keep.txt"), []byte("keep\n"), 0o644)
	gitIn(t, folder, "init", "-q", "-b", "trunk")
	gitIn(t, folder, "add", ".")
	gitIn(t, folder, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "start")
	res := root.post("/projects", url.Values{"name": {"local"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	start := strings.TrimSpace(gitIn(t, folder, "rev-parse", "HEAD"))

	submitOne := func(path, content string) int64 {
		_, base := root.session(id)
		root.put(base, path, []byte(content), nil)
		res := root.submit(base, "edit "+path)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("submit: %d %s", res.StatusCode, readBody(res))
		}
		cid := decode[changeJSON](t, res).ChangeID
		root.waitChange(id, cid, models.ChangeComposed)
		if res := root.act(id, cid, "approve"); res.StatusCode != http.StatusOK {
			t.Fatalf("approve: %d %s", res.StatusCode, readBody(res))
		}
		return cid
	}

	// Dirty: an uncommitted edit in the folder.
	cid := submitOne("README.md", "# From Atelier\n")
	os.WriteFile(filepath.Join(folder, "keep.txt"), []byte("keep, edited by hand\n"), 0o644)
	res = root.act(id, cid, "release")
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("release into a dirty folder: %d %s", res.StatusCode, readBody(res))
	}
	if ch := root.change(id, cid); ch.Status != models.ChangeVerified || ch.WaitReason == nil || *ch.WaitReason != "dirty_worktree" {
		t.Fatalf("dirty: %+v", ch)
	}
	if head := strings.TrimSpace(gitIn(t, folder, "rev-parse", "HEAD")); head != start {
		t.Fatal("the branch of a dirty folder moved")
	}
	if b, _ := os.ReadFile(filepath.Join(folder, "README.md")); string(b) != "# Local\n" {
		t.Fatalf("a dirty folder's file changed: %q", b)
	}
	if doc := root.page("/projects/" + itoa(id) + "/changes/" + itoa(cid)); doc.Find(".dirty-worktree").Length() != 1 {
		t.Fatal("the change page does not say what to do")
	}

	// Clean again: the release moves the branch and the work tree.
	gitIn(t, folder, "checkout", "-q", "--", "keep.txt")
	res = root.act(id, cid, "release")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("release into a clean folder: %d %s", res.StatusCode, readBody(res))
	}
	ch := root.change(id, cid)
	if head := strings.TrimSpace(gitIn(t, folder, "rev-parse", "trunk")); head != ch.Commit || ch.Status != models.ChangeReleased {
		t.Fatalf("trunk is %s, change %+v", head, ch)
	}
	if b, _ := os.ReadFile(filepath.Join(folder, "README.md")); string(b) != "# From Atelier\n" {
		t.Fatalf("the folder's file: %q", b)
	}
	if st := gitIn(t, folder, "status", "--porcelain"); st != "" {
		t.Fatalf("the folder is not clean after the release: %q", st)
	}
}

// Deleting a project removes its workspace forks with its changes.
func TestDeleteProjectRemovesWorkspaceForks(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	owner.editFile(id, "README.md", "# gone soon\n")
	fork := forkDir(t, h, id, "owner")
	if _, err := os.Stat(fork); err != nil {
		t.Fatalf("no workspace fork after a change: %v", err)
	}
	if res := owner.del("/projects/"+itoa(id), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	if _, err := os.Stat(fork); !os.IsNotExist(err) {
		t.Fatalf("the workspace fork outlived its project: %v", err)
	}
}
