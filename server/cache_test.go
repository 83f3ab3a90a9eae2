package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atelier/models"
	"atelier/testrig/wait"
	"atelier/workbench"
)

func needGo(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Skip("precondition: Go at /usr/local/go, on the sandbox's PATH")
	}
}

// importProject makes a project of files as owner and imports them.
func importProject(t *testing.T, owner *client, name string, files map[string]string) int64 {
	t.Helper()
	id := owner.createProject(name)
	var entries []entry
	for path, body := range files {
		entries = append(entries, entry{name: path, body: body})
	}
	if res := owner.upload(id, name+".tar.gz", tarGz(t, entries), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import %s: %d %s", name, res.StatusCode, readBody(res))
	}
	return id
}

// runExit runs command in the session and fails the test unless it
// exits with want.
func (c *client) runExit(base, command string, want int) string {
	c.h.t.Helper()
	out, res := c.run(base, command, "")
	if res.StatusCode != http.StatusOK || out.ExitCode != want {
		c.h.t.Fatalf("%q: %d, exit %d (want %d)\nstdout: %s\nstderr: %s", command, res.StatusCode, out.ExitCode, want, out.Stdout, out.Stderr)
	}
	return out.Stdout
}

func (c *client) discard(base string) {
	c.h.t.Helper()
	if res := c.post(base+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		c.h.t.Fatalf("discard %s: %d %s", base, res.StatusCode, readBody(res))
	}
}

// A module of two packages that import nothing, so that a cold build is
// quick: what the second build compiles is what the cache did not hold.
var twoPackages = map[string]string{
	"go.mod":       "module example.com/warm\n\ngo 1.22\n",
	"one/one.go":   "package one\n\n// One answers one.\nfunc One() int { return 1 }\n",
	"two/two.go":   "package two\n\nimport \"example.com/warm/one\"\n\n// Two answers two.\nfunc Two() int { return one.One() + 1 }\n",
	"README.md":    "# warm\n",
	"one/doc.txt":  "one\n",
	"two/notes.md": "two\n",
}

// The second session of a project builds with what the first one's build
// left: Go's caches are in the project's cache, and the second `go build`
// compiles nothing.
func TestSecondSessionBuildsWarm(t *testing.T) {
	needRoot(t)
	needGo(t)
	h := newHarness(t)
	owner := h.user("owner", false)
	id := importProject(t, owner, "warm", twoPackages)

	_, base := owner.session(id)
	out := owner.runExit(base, `go env GOCACHE GOMODCACHE && go build -x ./... 2>&1 | grep -c '/compile '`, 0)
	if got := strings.Fields(out); len(got) != 3 || got[0] != "/home/atelier/.cache/go-build" || got[1] != "/home/atelier/.cache/go-mod" || got[2] != "2" {
		t.Fatalf("the first session's Go caches and cold build (compiles counted): %q", out)
	}
	owner.discard(base)

	_, base = owner.session(id)
	if out := owner.runExit(base, `go build -x ./... 2>&1 | grep -c '/compile '`, 1); strings.TrimSpace(out) != "0" {
		t.Errorf("the second session's build compiled %s packages, want none", out)
	}
	// The cache is the project's, on its own disk in the data dir, not the
	// session's HOME.
	entries, _ := filepath.Glob(filepath.Join(h.cfg.SandboxCacheDir(), "p"+itoa(id), "cache", "go-build", "*", "*-a"))
	if len(entries) == 0 {
		t.Error("no Go cache entries in the project's cache on the host")
	}
}

// One session of a project holds its cache at a time; another person's
// session meanwhile has a HOME/.cache of its own. Projects never share one.
func TestCachesArePerProjectAndHeldInTurn(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, other := h.user("owner", false), h.user("other", false)
	files := map[string]string{"README.md": "# p\n"}
	one, two := importProject(t, owner, "one", files), importProject(t, owner, "two", files)
	owner.addMember(one, "other", "admin")

	_, base1 := owner.session(one)
	owner.runExit(base1, `echo one > ~/.cache/mark`, 0)
	_, base2 := owner.session(two)
	if out := owner.runExit(base2, `cat ~/.cache/mark 2>&1 || echo none; echo two > ~/.cache/mark`, 0); !strings.HasSuffix(out, "none\n") {
		t.Errorf("project two's session sees project one's cache: %q", out)
	}
	_, otherBase := other.session(one)
	if out := other.runExit(otherBase, `cat ~/.cache/mark 2>&1 || echo none; echo other > ~/.cache/mark`, 0); !strings.HasSuffix(out, "none\n") {
		t.Errorf("a second session of project one, while the first holds its cache: %q", out)
	}
	if out := owner.runExit(base1, `cat ~/.cache/mark`, 0); out != "one\n" {
		t.Errorf("the holder's cache changed under it: %q", out)
	}

	owner.discard(base1)
	_, base1 = owner.session(one)
	if out := owner.runExit(base1, `cat ~/.cache/mark`, 0); out != "one\n" {
		t.Errorf("project one's next session finds %q in its cache, want what the first left", out)
	}
	owner.discard(base2)
	_, base2 = owner.session(two)
	if out := owner.runExit(base2, `cat ~/.cache/mark`, 0); out != "two\n" {
		t.Errorf("project two's next session finds %q in its cache", out)
	}

	// A deleted project's cache goes with it.
	if res := owner.del("/projects/"+itoa(two), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	if left, _ := filepath.Glob(filepath.Join(h.cfg.SandboxCacheDir(), "p"+itoa(two)+"*")); len(left) > 0 {
		t.Errorf("a deleted project's cache is left: %q", left)
	}
}

// A cache past its share of ATELIER_SANDBOX_CACHE_BYTES loses what was
// used least recently when the next session takes it.
func TestCacheBoundEvictsLeastRecentlyUsed(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.SandboxCacheBytes = 32 << 20 })
	owner := h.user("owner", false)
	id := importProject(t, owner, "bounded", map[string]string{"README.md": "# p\n"})

	_, base := owner.session(id)
	// Three quarters of 32 MiB may stay; 24 MiB of files and the file
	// system's own blocks are more. The kernel's file times move in clock
	// ticks: the sleeps keep the uses apart.
	owner.runExit(base, `cd ~/.cache && head -c 8M /dev/urandom > a && sleep 0.05 && head -c 8M /dev/urandom > b && sleep 0.05 &&
head -c 8M /dev/urandom > c && sleep 0.05 && cat a > /dev/null && sync`, 0)
	owner.discard(base)

	_, base = owner.session(id)
	if out := owner.runExit(base, `ls ~/.cache`, 0); out != "a\nc\n" {
		t.Errorf("the cache holds %q, want a (read last) and c, not b", out)
	}
}

// A session can plant an entry in its project's cache that makes a broken
// build pass: here the object file of a package whose F answers 2, swapped
// for that of the same package answering 1 (the same size, which is all
// Go checks). Later sessions of the project build with it, but a Change's
// check builds clean: its evidence is the failure a clean build gives.
func TestPlantedCacheEntryCannotFakeACheck(t *testing.T) {
	needRoot(t)
	needGo(t)
	h := newHarness(t)
	runPipeline(t, h)
	owner, other := h.user("owner", false), h.user("other", false)
	id := importProject(t, owner, "planted", map[string]string{
		"go.mod":     "module example.com/planted\n\ngo 1.22\n",
		"lib/lib.go": "package lib\n\n// F should answer one.\nfunc F() int { return 2 }\n",
		"main.go":    "package main\n\nimport \"example.com/planted/lib\"\n\nfunc main() {\n\tif lib.F() != 1 {\n\t\tpanic(\"F is broken\")\n\t}\n}\n",
		"README.md":  "# planted\n",
	})
	owner.addMember(id, "other", "admin")
	owner.setCheck(id, "go run .")

	_, base := other.session(id)
	other.runExit(base, `set -e
sed -i 's/return 2/return 1/' lib/lib.go; good=$(go list -export -f '{{.Export}}' ./lib)
sed -i 's/return 1/return 2/' lib/lib.go; bad=$(go list -export -f '{{.Export}}' ./lib)
test "$(stat -c %s "$good")" = "$(stat -c %s "$bad")"
cat "$good" > "$bad"`, 0)
	other.discard(base)

	_, base = owner.session(id)
	// The planted entry is in the project's cache, and it works.
	owner.runExit(base, `go run .`, 0)
	owner.put(base, "README.md", []byte("# planted, and checked\n"), nil)
	res := owner.submit(base, "readme")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", res.StatusCode, readBody(res))
	}
	// The check builds Go's runtime cold: longer than waitChange waits.
	cid := decode[changeJSON](t, res).ChangeID
	var ch changeJSON
	wait.Until(wait.Span(workbench.CommandTimeout)+wait.Long, func() bool {
		ch = owner.change(id, cid)
		return ch.Status == models.ChangeFailed || ch.Status == models.ChangeVerified
	})
	if ch.Status != models.ChangeFailed || len(ch.Evidence) != 1 || ch.Evidence[0].Passed ||
		!strings.Contains(*ch.Evidence[0].OutputTail, "F is broken") {
		t.Fatalf("the check of a broken build: %s, evidence %+v", ch.Status, ch.Evidence)
	}
}

// All projects' caches on a host stay within ATELIER_SANDBOX_CACHE_TOTAL,
// each held one counted whole: the cache no session holds that was used
// least recently goes whole to make room, and a session that finds no room
// even then goes without, with a HOME/.cache of its own.
func TestCacheTotalRemovesLeastRecentlyUsedCaches(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.SandboxCacheBytes, c.SandboxCacheTotal = 16<<20, 34<<20 })
	owner := h.user("owner", false)
	files := map[string]string{"README.md": "# p\n"}
	a, b, c := importProject(t, owner, "a", files), importProject(t, owner, "b", files), importProject(t, owner, "c", files)
	image := func(id int64) string { return filepath.Join(h.cfg.SandboxCacheDir(), "p"+itoa(id)+".img") }

	// a, then b, fill 9 MiB of their caches and end.
	for _, id := range []int64{a, b} {
		_, base := owner.session(id)
		owner.runExit(base, `echo mine > ~/.cache/mark && head -c 9M /dev/urandom > ~/.cache/big && sync`, 0)
		owner.discard(base)
	}
	// c's cache (16 MiB, held) and a's and b's (over 9 MiB each) pass
	// 34 MiB: a's, used before b's, goes.
	_, baseC := owner.session(c)
	owner.runExit(baseC, `true`, 0)
	if _, err := os.Stat(image(a)); !os.IsNotExist(err) {
		t.Errorf("a's cache is still there: %v", err)
	}
	if _, err := os.Stat(image(b)); err != nil {
		t.Errorf("b's cache went: %v", err)
	}
	_, baseB := owner.session(b)
	if out := owner.runExit(baseB, `cat ~/.cache/mark`, 0); out != "mine\n" {
		t.Errorf("b's next session finds %q", out)
	}
	// b's and c's caches held, 32 MiB: no room for a's.
	_, baseA := owner.session(a)
	if out := owner.runExit(baseA, `cat ~/.cache/mark 2>&1 || echo none; echo own > ~/.cache/mark`, 0); !strings.HasSuffix(out, "none\n") {
		t.Errorf("a's session while b's and c's caches are held: %q", out)
	}
	if _, err := os.Stat(image(a)); !os.IsNotExist(err) {
		t.Errorf("a's cache was made beyond the total: %v", err)
	}
}
