package workbench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/gitsvc"
	"atelier/storage/codestore"
	"atelier/testrig/wait"
)

// A commit is listed once while any checkout holds its listing: a second
// checkout of it (another session's fork, holding the same commit) shares
// the first's. Once none holds it, it is forgotten
// (the map keeps listings weakly), and the next checkout lists again.
func TestCheckoutsOfACommitShareItsListing(t *testing.T) {
	ls := newListings()
	lists := 0
	list := func() (map[string]gitsvc.Entry, error) {
		lists++
		return map[string]gitsvc.Entry{
			"a/b.go": {Path: "a/b.go", Type: "blob"}, "z.txt": {Path: "z.txt", Type: "blob"},
			"mod": {Path: "mod", Type: "commit"},
		}, nil
	}
	first, err := ls.get("c1", list)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ls.get("c1", list)
	if err != nil || second != first || lists != 1 {
		t.Fatalf("a second checkout of the commit listed again (%d lists, shared %v, %v)", lists, second == first, err)
	}
	if other, _ := ls.get("c0", list); other == first || lists != 2 {
		t.Fatal("another commit shared the listing")
	}
	if got := first.paths(); len(got) != 2 || got[0] != "a/b.go" || got[1] != "z.txt" {
		t.Errorf("paths %v, want the blobs sorted", got)
	}
	if !first.holds("a") || first.holds("mod") || first.holds("z.txt") {
		t.Error("holds should be true for a folder holding a blob, only")
	}
	boom := errors.New("git failed")
	if _, err := ls.get("c2", func() (map[string]gitsvc.Entry, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed listing: %v", err)
	}

	wait.For(t, wait.Long, "the unheld listings forgotten", func() bool {
		runtime.GC()
		ls.mu.Lock()
		defer ls.mu.Unlock()
		return len(ls.byID) == 0
	})
	if _, err := ls.get("c1", list); err != nil || lists != 3 {
		t.Fatalf("after it was forgotten, the commit was not listed again (%d lists, %v)", lists, err)
	}
}

// Two sessions of one commit check out two forks (each person's); the
// first capture of the second reads the listing the first made instead of
// listing the commit again with git.
func TestForksOfACommitShareItsListing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	realGit, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	lsTrees := filepath.Join(dir, "ls-trees")
	counting := filepath.Join(dir, "git")
	script := "#!/bin/sh\ncase \" $* \" in *\" ls-tree \"*) echo >>" + lsTrees + ";; esac\nexec " + realGit + " \"$@\"\n"
	if err := os.WriteFile(counting, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	git, err := gitsvc.New(gitsvc.Config{Root: filepath.Join(dir, "repos"), GitPath: counting})
	if err != nil {
		t.Fatal(err)
	}
	canonical, commit, err := git.CreateCanonical(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRuntime(RuntimeOptions{Git: git, Now: time.Now})
	var bases []*baseListing
	for _, name := range []string{"ann-fork", "bob-fork"} {
		fork, err := git.Fork(ctx, canonical, commit, name)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(lsTrees) // what the fork ran is not a listing
		co := &checkout{}
		sess := editsession.Identity{Source: codestore.Source{Repo: fork, Commit: commit}}
		if _, err := r.baseEntries(ctx, sess, co); err != nil {
			t.Fatal(err)
		}
		bases = append(bases, co.base)
		// The first lists the commit once; the second not at all.
		ran, _ := os.ReadFile(lsTrees)
		if want := 2 - len(bases); len(ran) != want {
			t.Fatalf("checkout %d of the commit ran git ls-tree %d times, want %d", len(bases), len(ran), want)
		}
	}
	if bases[0] != bases[1] {
		t.Fatal("the second fork's checkout does not share the first's listing")
	}
}
