package gitsvc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCanonicalPath(t *testing.T) {
	s := newService(t)
	tests := []struct {
		name string
		ok   bool
	}{
		{"app", true},
		{"My-App_2", true},
		{"-", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"../x", false},
		{"a.b", false},
		{"a b", false},
		{"café", false},
		{"a\x00", false},
	}
	for _, tt := range tests {
		p, err := s.CanonicalPath(tt.name)
		if !tt.ok {
			if !errors.Is(err, ErrBadName) {
				t.Errorf("CanonicalPath(%q) = %q, %v; want ErrBadName", tt.name, p, err)
			}
			continue
		}
		if err != nil || p != filepath.Join(s.root, tt.name+".git") {
			t.Errorf("CanonicalPath(%q) = %q, %v", tt.name, p, err)
		}
	}
}

func TestCreateOpenRemoveCanonical(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first, err := s.CreateCanonical(ctx, "proj")
	if err != nil {
		t.Fatal(err)
	}
	if r.GitDir != filepath.Join(s.root, "proj.git") || r.WorkTree != "" {
		t.Errorf("repo = %+v", r)
	}
	if got := tgit(t, r.GitDir, "rev-parse", "--verify", "refs/heads/main"); got != first {
		t.Errorf("main = %s, want %s", got, first)
	}
	if got := tgit(t, r.GitDir, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
		t.Errorf("HEAD -> %s", got)
	}
	if got := tgit(t, r.GitDir, "rev-parse", "--is-bare-repository"); got != "true" {
		t.Errorf("bare = %s", got)
	}
	body := tgit(t, r.GitDir, "cat-file", "commit", first)
	if !strings.HasPrefix(body, "tree "+emptyTree+"\n") || !strings.HasSuffix(body, "\n\nCreate project") || strings.Contains(body, "\nparent ") {
		t.Errorf("first commit:\n%s", body)
	}
	tgit(t, r.GitDir, "fsck", "--strict") // the empty tree really is stored
	if c, b, err := s.Head(ctx, r); err != nil || c != first || b != "main" {
		t.Errorf("Head = %s, %q, %v", c, b, err)
	}

	if _, _, err := s.CreateCanonical(ctx, "proj"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second create: %v, want fs.ErrExist", err)
	}
	if _, _, err := s.CreateCanonical(ctx, "../evil"); !errors.Is(err, ErrBadName) {
		t.Errorf("create ../evil: %v, want ErrBadName", err)
	}

	o, err := s.OpenBare("proj")
	if err != nil || o.GitDir != r.GitDir {
		t.Errorf("OpenBare = %+v, %v", o, err)
	}
	if _, err := s.OpenBare("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenBare(nope): %v, want ErrNotFound", err)
	}
	if _, err := s.OpenBare("a/b"); !errors.Is(err, ErrBadName) {
		t.Errorf("OpenBare(a/b): %v, want ErrBadName", err)
	}

	if err := s.RemoveRepo(ctx, "proj"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(r.GitDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("repository still there: %v", err)
	}
	if _, err := s.OpenBare("proj"); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenBare after remove: %v", err)
	}
	if err := s.RemoveRepo(ctx, "proj"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second remove: %v, want ErrNotFound", err)
	}
	entries, _ := os.ReadDir(s.root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			t.Errorf("left behind %s", e.Name())
		}
	}
	// The name is free again.
	if _, _, err := s.CreateCanonical(ctx, "proj"); err != nil {
		t.Errorf("create after remove: %v", err)
	}
}

// A process that ran without the lock (a reader of the fork, say) may
// still hold a folder of a repository being removed and write into it. The
// removal is done once the rename is: it must not fail over what such a
// writer adds to the trash, and the next start sweeps what stays.
func TestRemoveRepoDespiteALateWriter(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _, err := s.CreateCanonical(ctx, "proj")
	if err != nil {
		t.Fatal(err)
	}
	objects, err := os.OpenRoot(filepath.Join(r.GitDir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer objects.Close()
	stop, wrote := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				wrote <- n
				return
			default:
			}
			if f, err := objects.Create(fmt.Sprintf("late-%d", n)); err == nil {
				f.Close()
				n++
			}
		}
	}()
	for len(mustReadDir(t, filepath.Join(r.GitDir, "objects"))) < 100 {
		runtime.Gosched()
	}
	err = s.RemoveRepo(ctx, "proj")
	close(stop)
	if n := <-wrote; n == 0 {
		t.Fatal("the writer never wrote")
	}
	if err != nil {
		t.Fatalf("RemoveRepo with a late writer: %v", err)
	}
	if _, err := s.OpenBare("proj"); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenBare after remove: %v, want ErrNotFound", err)
	}
	if _, _, err := s.CreateCanonical(ctx, "proj"); err != nil {
		t.Errorf("create after remove: %v", err)
	}
	if _, err := New(Config{Root: s.root}); err != nil {
		t.Fatal(err)
	}
	for _, e := range mustReadDir(t, s.root) {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			t.Errorf("the next start left %s", e.Name())
		}
	}
}

func mustReadDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestRemoveRepoNeverLeavesRoot(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	outside := realDir(t)
	writeFile(t, filepath.Join(outside, "precious"), "keep")
	if err := os.Symlink(outside, filepath.Join(s.root, "link.git")); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveRepo(ctx, "link"); err == nil {
		t.Fatal("removed a symlink's target")
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Fatalf("the folder outside the root was touched: %v", err)
	}
	if err := s.RemoveRepo(ctx, ".."); !errors.Is(err, ErrBadName) {
		t.Errorf("RemoveRepo(..): %v, want ErrBadName", err)
	}
}

func TestOpenLocal(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	repo := newRepo(t)
	wt := filepath.Join(realDir(t), "wt")
	tgit(t, repo, "worktree", "add", "-q", "-b", "feature", wt)
	writeFile(t, filepath.Join(wt, "f"), "on the worktree")
	tgit(t, wt, "add", "f")
	tgit(t, wt, "commit", "-q", "-m", "feature work")
	bare := filepath.Join(realDir(t), "b.git")
	tgit(t, filepath.Dir(bare), "init", "-q", "--bare", bare)

	tests := []struct {
		name               string
		folder             string
		gitDir, workTree   string
		headOf, wantBranch string // Head's expected commit is rev-parse HEAD in headOf
	}{
		{"repository", repo, filepath.Join(repo, ".git"), repo, repo, "main"},
		{"worktree", wt, filepath.Join(repo, ".git"), wt, wt, "feature"},
		{"bare", bare, bare, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := s.OpenLocal(ctx, tt.folder)
			if err != nil {
				t.Fatal(err)
			}
			if r.GitDir != tt.gitDir || r.WorkTree != tt.workTree {
				t.Fatalf("OpenLocal = {%s %s}, want {%s %s}", r.GitDir, r.WorkTree, tt.gitDir, tt.workTree)
			}
			commit, branch, err := s.Head(ctx, r)
			if tt.headOf == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("Head of an empty repository: %v, want ErrNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := tgit(t, tt.headOf, "rev-parse", "HEAD"); commit != want || branch != tt.wantBranch {
				t.Errorf("Head = %s %q, want %s %q", commit, branch, want, tt.wantBranch)
			}
		})
	}

	t.Run("detached", func(t *testing.T) {
		tgit(t, repo, "checkout", "-q", "--detach")
		defer tgit(t, repo, "checkout", "-q", "main")
		r, err := s.OpenLocal(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		if c, b, err := s.Head(ctx, r); err != nil || b != "" || c != tgit(t, repo, "rev-parse", "HEAD") {
			t.Errorf("Head = %s %q %v, want the commit and no branch", c, b, err)
		}
	})

	t.Run("not repositories", func(t *testing.T) {
		sub := filepath.Join(repo, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, folder := range []string{realDir(t), sub, filepath.Join(repo, ".git", "objects")} {
			_, err := s.OpenLocal(ctx, folder)
			var ge *GitError
			if !errors.Is(err, ErrNotRepository) || !errors.As(err, &ge) || ge.ExitCode != 128 {
				t.Errorf("OpenLocal(%s) = %v, want ErrNotRepository from git's exit 128", folder, err)
			}
		}
	})

	t.Run("bad folders", func(t *testing.T) {
		if _, err := s.OpenLocal(ctx, filepath.Join(repo, "missing")); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRepository) {
			t.Errorf("missing folder: %v, want fs.ErrNotExist", err)
		}
		if _, err := s.OpenLocal(ctx, "relative"); !errors.Is(err, ErrBadArgument) {
			t.Errorf("relative folder: %v, want ErrBadArgument", err)
		}
	})
}

// brokenGits are git binaries that fail in ways that do not mean "not a
// repository", however much they look like it.
func brokenGits(t *testing.T) map[string]string {
	return map[string]string{
		"missing binary":         filepath.Join(t.TempDir(), "no-such-git"),
		"exit 1 with the text":   script(t, `echo "fatal: not a git repository (or any of the parent directories): .git" >&2; exit 1`),
		"exit 128 other message": script(t, `echo "fatal: unable to read config" >&2; exit 128`),
		"killed":                 script(t, `kill -SEGV $$`),
	}
}

func TestOpenLocalWithBrokenGit(t *testing.T) {
	ctx := testContext(t)
	repo := newRepo(t)
	for name, git := range brokenGits(t) {
		t.Run(name, func(t *testing.T) {
			s := newService(t, withGit(git))
			for _, folder := range []string{repo, realDir(t)} {
				_, err := s.OpenLocal(ctx, folder)
				var ge *GitError
				if err == nil || errors.Is(err, ErrNotRepository) || !errors.As(err, &ge) {
					t.Errorf("OpenLocal(%s) = %v, want a *GitError that is not ErrNotRepository", folder, err)
				}
			}
		})
	}
}

func TestResolveCommit(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	repo := newRepo(t)
	r, err := s.OpenLocal(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	head := tgit(t, repo, "rev-parse", "HEAD")
	for _, rev := range []string{"main", "HEAD", head, head[:10], "refs/heads/main"} {
		if got, err := s.ResolveCommit(ctx, r, rev); err != nil || got != head {
			t.Errorf("ResolveCommit(%q) = %s, %v; want %s", rev, got, err, head)
		}
	}
	tree := tgit(t, repo, "rev-parse", "HEAD^{tree}")
	for _, rev := range []string{"nope", "HEAD~5", tree} {
		if got, err := s.ResolveCommit(ctx, r, rev); !errors.Is(err, ErrNotFound) {
			t.Errorf("ResolveCommit(%q) = %s, %v; want ErrNotFound", rev, got, err)
		}
	}
}
