package server

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/projects"
	"atelier/testrig/githttptest"
)

// smallArchive is a one-file archive to import.
func smallArchive(t *testing.T, body string) []byte {
	return tarGz(t, []entry{{name: "a.txt", body: body}})
}

// waitHeld waits until the held request arrived, so the import that sent
// it is running.
func waitHeld(t *testing.T, hold *githttptest.Hold, done <-chan string) {
	t.Helper()
	select {
	case <-hold.Held:
	case res := <-done:
		t.Fatalf("the import ended before it fetched: %s", res)
	case <-time.After(30 * time.Second):
		t.Fatal("the import never fetched")
	}
}

func waitDone(t *testing.T, done <-chan string) string {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(60 * time.Second):
		t.Fatal("the import did not finish")
		return ""
	}
}

// TestImportsRunOneAtATimePerProject: while an import of a project runs, a
// second one is refused with 429 import_busy, and the instance runs no more
// than ATELIER_IMPORTS_MAX imports at once; a finished import frees its
// place.
func TestImportsRunOneAtATimePerProject(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ImportsMax = 2 })
	admin := h.user("root", true) // site admins may fetch from loopback
	p1, p2, p3 := admin.createProject("one"), admin.createProject("two"), admin.createProject("three")
	srv := githttptest.New(t, sourceRepos(t), "", "")
	source := srv.URL + "/repo.git"

	hold1 := srv.HoldNext()
	done1 := admin.importAsync(p1, source)
	waitHeld(t, hold1, done1)
	expectProblem(t, admin.upload(p1, "a.tar.gz", smallArchive(t, "second\n"), jsonAccept), http.StatusTooManyRequests, "import_busy")
	if res := admin.upload(p2, "a.tar.gz", smallArchive(t, "other project\n"), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("another project's import while one runs: %d %s", res.StatusCode, readBody(res))
	}

	hold2 := srv.HoldNext()
	done2 := admin.importAsync(p2, source)
	waitHeld(t, hold2, done2)
	expectProblem(t, admin.upload(p3, "a.tar.gz", smallArchive(t, "third\n"), jsonAccept), http.StatusTooManyRequests, "import_busy")

	hold1.Release()
	hold2.Release()
	for _, done := range []<-chan string{done1, done2} {
		if res := waitDone(t, done); !strings.HasPrefix(res, "200 ") {
			t.Fatalf("held import: %s", res)
		}
	}
	if res := admin.upload(p1, "a.tar.gz", smallArchive(t, "after\n"), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("an import after the running one ended: %d %s", res.StatusCode, readBody(res))
	}
	if res := admin.upload(p3, "a.tar.gz", smallArchive(t, "after\n"), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("an import after the instance's ones ended: %d %s", res.StatusCode, readBody(res))
	}
}

// TestImportsPerHourAreBounded: a person starts at most
// ATELIER_IMPORTS_PER_HOUR imports in an hour; the next is a 429
// too_many_imports saying when to retry, and other people are not held
// back.
func TestImportsPerHourAreBounded(t *testing.T) {
	const perHour = 3
	h := newHarness(t, func(c *Config) { c.ImportsPerHour = perHour })
	owner := h.user("owner", false)
	id := owner.createProject("busy")
	for i := range perHour {
		if res := owner.upload(id, "a.tar.gz", smallArchive(t, strconv.Itoa(i)), jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("import %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
	}
	res := owner.upload(id, "a.tar.gz", smallArchive(t, "one too many"), jsonAccept)
	expectProblem(t, res, http.StatusTooManyRequests, "too_many_imports")
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 3500 || s > 3600 {
		t.Fatalf("Retry-After %q, want about an hour in seconds", res.Header.Get("Retry-After"))
	}
	// A git source counts the same, and so does a fresh project: deleting
	// the old one forgets nothing.
	res = owner.post("/projects/"+itoa(id)+"/import", url.Values{"source": {"https://example.com/x.git"}}, jsonAccept)
	expectProblem(t, res, http.StatusTooManyRequests, "too_many_imports")
	if res := owner.del("/projects/"+itoa(id), jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	fresh := owner.createProject("fresh")
	expectProblem(t, owner.upload(fresh, "a.tar.gz", smallArchive(t, "again"), jsonAccept), http.StatusTooManyRequests, "too_many_imports")

	other := h.user("other", false)
	theirs := other.createProject("theirs")
	if res := other.upload(theirs, "a.tar.gz", smallArchive(t, "mine"), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("another person's import: %d %s", res.StatusCode, readBody(res))
	}
}

// TestProjectsPerPersonAreBounded: a person owns at most
// ATELIER_MAX_PROJECTS_PER_USER projects (100 by default); the next
// creation is a 403 too_many_projects.
func TestProjectsPerPersonAreBounded(t *testing.T) {
	h := newHarness(t)
	c := h.user("prolific", false)
	for i := range projects.DefaultMaxOwned {
		c.createProject("p" + strconv.Itoa(i))
	}
	res := c.post("/projects", url.Values{"name": {"one more"}, "mode": {"container"}}, jsonAccept)
	expectProblem(t, res, http.StatusForbidden, "too_many_projects")
}

// TestSessionsPerPersonAreBounded: one person holds at most
// ATELIER_MAX_SESSIONS_PER_USER open sessions across projects (4 by
// default): the fifth opening is a 429 too_many_sessions that says so, the
// four open ones keep their edits and take more, and once one ends the
// fifth opens.
func TestSessionsPerPersonAreBounded(t *testing.T) {
	h := newHarness(t)
	c := h.user("busy", false)
	var bases []string
	for i := range 4 {
		_, base := c.session(c.createProject("p" + strconv.Itoa(i)))
		if res := c.put(base, "a.txt", []byte("kept "+strconv.Itoa(i)), nil); res.StatusCode >= 300 {
			t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
		}
		bases = append(bases, base)
	}
	fifth := c.createProject("fifth")
	res := c.post("/projects/"+itoa(fifth)+"/sessions", nil, jsonAccept)
	p := expectProblem(t, res, http.StatusTooManyRequests, "too_many_sessions")
	if !strings.Contains(p.Error, "as one person may (4, in other projects)") {
		t.Errorf("the refusal does not say the bound: %q", p.Error)
	}
	for i, base := range bases {
		res := c.get(base+"/file?path=a.txt", jsonAccept)
		if body := readBody(res); res.StatusCode != http.StatusOK || body != "kept "+strconv.Itoa(i) {
			t.Errorf("session %d after the refusal: %d %q", i, res.StatusCode, body)
		}
		if res := c.put(base, "b.txt", []byte("more"), nil); res.StatusCode >= 300 {
			t.Errorf("a save in session %d after the refusal: %d %s", i, res.StatusCode, readBody(res))
		}
	}
	if res := c.post(bases[0]+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("discard: %d %s", res.StatusCode, readBody(res))
	}
	if _, status := c.openSession(fifth); status != http.StatusCreated {
		t.Errorf("the fifth once one ended: %d", status)
	}
}
