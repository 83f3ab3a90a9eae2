package gitsvc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// project is the folder TestCommitTreeAndRead commits: awkward names
// included, read back through -z output.
var project = map[string]string{
	"a.txt":          "hello\n",
	"with space.txt": "space",
	"new\nline.txt":  "newline",
	"-rf":            "a name like an option",
	"dir/b.txt":      "b",
	"dir/sub/c.bin":  string([]byte{0, 1, 2, 255, '\n', 0}),
	"tab\there":      "tab",
	"ünï":            "utf-8",
}

func TestCommitTreeAndRead(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")

	root, entries, err := s.ListAll(ctx, r, first)
	if err != nil || root != emptyTree || len(entries) != 0 {
		t.Fatalf("ListAll(first) = %s, %v, %v", root, entries, err)
	}

	dir := t.TempDir()
	for name, content := range project {
		writeFile(t, filepath.Join(dir, name), content)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	commit, err := s.CommitTree(ctx, r, dir, []string{first}, "Save\n\nwith a body\n")
	if err != nil {
		t.Fatal(err)
	}
	if c, b, err := s.Head(ctx, r); err != nil || c != commit || b != "main" {
		t.Fatalf("Head = %s %q %v, want %s main", c, b, err, commit)
	}
	if got := tgit(t, r.GitDir, "rev-list", "--parents", "-1", commit); got != commit+" "+first {
		t.Errorf("parents: %s", got)
	}
	if got := tgit(t, r.GitDir, "log", "-1", "--format=%B", commit); got != "Save\n\nwith a body\n" {
		t.Errorf("message %q", got)
	}

	root, entries, err = s.ListAll(ctx, r, commit)
	if err != nil {
		t.Fatal(err)
	}
	if want := tgit(t, r.GitDir, "rev-parse", commit+"^{tree}"); root != want {
		t.Errorf("root tree %s, want %s", root, want)
	}
	byPath := map[string]Entry{}
	for _, e := range entries {
		byPath[e.Path] = e
	}
	wantPaths := []string{"dir", "dir/sub", "link", "run.sh"}
	for name := range project {
		wantPaths = append(wantPaths, name)
	}
	slices.Sort(wantPaths)
	gotPaths := make([]string, 0, len(byPath))
	for p := range byPath {
		gotPaths = append(gotPaths, p)
	}
	slices.Sort(gotPaths)
	if !slices.Equal(gotPaths, wantPaths) || len(entries) != len(wantPaths) {
		t.Fatalf("ListAll paths\n%q\nwant\n%q", gotPaths, wantPaths)
	}
	// Paths names the same entries, awkward names and all.
	if paths, err := s.Paths(ctx, r, commit); err != nil || !slices.Equal(slices.Sorted(slices.Values(paths)), wantPaths) {
		t.Fatalf("Paths = %q, %v\nwant %q", paths, err, wantPaths)
	}
	if paths, err := s.Paths(ctx, r, first); err != nil || len(paths) != 0 {
		t.Fatalf("Paths of an empty tree = %q, %v", paths, err)
	}
	checks := []Entry{
		{Path: "dir", Mode: "040000", Type: "tree", Size: -1},
		{Path: "dir/sub", Mode: "040000", Type: "tree", Size: -1},
		{Path: "link", Mode: "120000", Type: "blob", Size: int64(len("a.txt"))},
		{Path: "run.sh", Mode: "100755", Type: "blob", Size: int64(len("#!/bin/sh\n"))},
		{Path: "new\nline.txt", Mode: "100644", Type: "blob", Size: int64(len("newline"))},
		{Path: "dir/sub/c.bin", Mode: "100644", Type: "blob", Size: 6},
	}
	for _, want := range checks {
		got := byPath[want.Path]
		if got.Mode != want.Mode || got.Type != want.Type || got.Size != want.Size || !isOID(got.SHA) {
			t.Errorf("%q = %+v, want %+v", want.Path, got, want)
		}
	}

	t.Run("List", func(t *testing.T) {
		names := func(es []Entry) []string {
			var ns []string
			for _, e := range es {
				ns = append(ns, e.Path)
			}
			return ns
		}
		top, err := s.List(ctx, r, commit, "")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"-rf", "a.txt", "dir", "link", "new\nline.txt", "run.sh", "tab\there", "with space.txt", "ünï"}
		if got := names(top); !slices.Equal(got, want) {
			t.Errorf("List(root) = %q, want %q", got, want)
		}
		sub, err := s.List(ctx, r, commit, "dir")
		if err != nil {
			t.Fatal(err)
		}
		if len(sub) != 2 || sub[0] != (Entry{"100644", "blob", byPath["dir/b.txt"].SHA, 1, "b.txt"}) ||
			sub[1] != (Entry{"040000", "tree", byPath["dir/sub"].SHA, -1, "sub"}) {
			t.Errorf("List(dir) = %+v", sub)
		}
		if got, err := s.List(ctx, r, commit, "dir/sub"); err != nil || !slices.Equal(names(got), []string{"c.bin"}) {
			t.Errorf("List(dir/sub) = %+v, %v", got, err)
		}
		for _, d := range []string{"a.txt", "missing", "dir/missing"} {
			if _, err := s.List(ctx, r, commit, d); !errors.Is(err, ErrNotFound) {
				t.Errorf("List(%q): %v, want ErrNotFound", d, err)
			}
		}
		if _, err := s.List(ctx, r, strings.Repeat("0", 40), ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("List of a missing commit: %v, want ErrNotFound", err)
		}
		for _, d := range []string{"../x", "dir/", "/dir", "dir//sub", "./dir"} {
			if _, err := s.List(ctx, r, commit, d); !errors.Is(err, ErrBadArgument) {
				t.Errorf("List(%q): %v, want ErrBadArgument", d, err)
			}
		}
		if _, err := s.List(ctx, r, "main:dir", ""); !errors.Is(err, ErrBadArgument) {
			t.Errorf("a revision with a path in it: %v, want ErrBadArgument", err)
		}
	})

	t.Run("ReadBlob", func(t *testing.T) {
		for name, content := range project {
			data, size, err := s.ReadBlob(ctx, r, commit, name)
			if err != nil || string(data) != content || size != int64(len(content)) {
				t.Errorf("ReadBlob(%q) = %q, %d, %v; want %q", name, data, size, err, content)
			}
		}
		if data, _, err := s.ReadBlob(ctx, r, commit, "link"); err != nil || string(data) != "a.txt" {
			t.Errorf("ReadBlob(link) = %q, %v", data, err)
		}
		if _, _, err := s.ReadBlob(ctx, r, commit, "dir"); !errors.Is(err, ErrNotBlob) {
			t.Errorf("ReadBlob(dir): %v, want ErrNotBlob", err)
		}
		for _, p := range []string{"missing", "dir/missing", "a.txt/x"} {
			if _, _, err := s.ReadBlob(ctx, r, commit, p); !errors.Is(err, ErrNotFound) {
				t.Errorf("ReadBlob(%q): %v, want ErrNotFound", p, err)
			}
		}
		for _, p := range []string{"", "../a.txt", "dir/", "a\x00b"} {
			if _, _, err := s.ReadBlob(ctx, r, commit, p); !errors.Is(err, ErrBadArgument) {
				t.Errorf("ReadBlob(%q): %v, want ErrBadArgument", p, err)
			}
		}
	})

	t.Run("Batch", func(t *testing.T) {
		b, err := s.OpenBatch(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for name, content := range project {
			typ, data, err := b.Read(byPath[name].SHA)
			if err != nil || typ != "blob" || string(data) != content {
				t.Errorf("Read(%q) = %s %q %v", name, typ, data, err)
			}
		}
		if typ, _, err := b.Read(root); err != nil || typ != "tree" {
			t.Errorf("Read(root) = %s, %v", typ, err)
		}
		if _, _, err := b.Read(strings.Repeat("1", 40)); !errors.Is(err, ErrNotFound) {
			t.Errorf("Read(missing): %v, want ErrNotFound", err)
		}
		if _, _, err := b.Read("a\nb"); !errors.Is(err, ErrBadArgument) {
			t.Errorf("Read with a newline: %v, want ErrBadArgument", err)
		}
		// Still in step after the misses.
		if typ, data, err := b.Read(commit + ":a.txt"); err != nil || typ != "blob" || string(data) != "hello\n" {
			t.Errorf("Read after a miss = %s %q %v", typ, data, err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Read(root); err == nil {
			t.Error("Read after Close worked")
		}
	})
}

func TestCommitTreeRefusals(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")

	withGitDir := t.TempDir()
	writeFile(t, filepath.Join(withGitDir, ".git", "HEAD"), "ref: refs/heads/main\n")
	for name, call := range map[string]func() error{
		"folder with .git":  func() error { _, err := s.CommitTree(ctx, r, withGitDir, []string{first}, "m"); return err },
		"relative folder":   func() error { _, err := s.CommitTree(ctx, r, "rel", []string{first}, "m"); return err },
		"parent not a hash": func() error { _, err := s.CommitTree(ctx, r, t.TempDir(), []string{"main"}, "m"); return err },
		"tree not a hash":   func() error { _, err := s.CommitWithParents(ctx, r, "HEAD^{tree}", []string{first}, "m"); return err },
		"no repository":     func() error { _, err := s.CommitTree(ctx, nil, t.TempDir(), []string{first}, "m"); return err },
	} {
		if err := call(); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%s: %v, want ErrBadArgument", name, err)
		}
	}
	if got := tgit(t, r.GitDir, "rev-parse", "main"); got != first {
		t.Errorf("main moved to %s", got)
	}
}

func TestStaleParentIsRefused(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), "one")
	mine, err := s.CommitTree(ctx, r, dir, []string{first}, "one")
	if err != nil {
		t.Fatal(err)
	}

	// Another writer (a person's git, say) moves main meanwhile.
	theirs := tgit(t, r.GitDir, "commit-tree", "-p", mine, "-m", "theirs", emptyTree)
	tgit(t, r.GitDir, "update-ref", "refs/heads/main", theirs)

	writeFile(t, filepath.Join(dir, "f"), "two")
	tree := tgit(t, r.GitDir, "rev-parse", mine+"^{tree}")
	for name, call := range map[string]func() error{
		"CommitTree on the old tip":        func() error { _, err := s.CommitTree(ctx, r, dir, []string{mine}, "two"); return err },
		"CommitTree without parents":       func() error { _, err := s.CommitTree(ctx, r, dir, nil, "two"); return err },
		"CommitWithParents on the old tip": func() error { _, err := s.CommitWithParents(ctx, r, tree, []string{first, mine}, "m"); return err },
	} {
		if err := call(); !errors.Is(err, ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", name, err)
		}
		if got := tgit(t, r.GitDir, "rev-parse", "main"); got != theirs {
			t.Fatalf("%s: main = %s, the other writer's %s was overwritten", name, got, theirs)
		}
	}
	if _, err := s.CommitTree(ctx, r, dir, []string{theirs}, "two"); err != nil {
		t.Errorf("commit on the current tip: %v", err)
	}
}

func TestConcurrentCommitsLoseNothing(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	const writers = 6
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "f"), strings.Repeat("x", i))
		wg.Go(func() {
			for {
				head, _, err := s.Head(ctx, r)
				if err != nil {
					errs <- err
					return
				}
				_, err = s.CommitTree(ctx, r, dir, []string{head}, "w")
				if !errors.Is(err, ErrConflict) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := tgit(t, r.GitDir, "rev-list", "--count", "main"); n != "7" {
		t.Errorf("main has %s commits, want 7: a commit was lost", n)
	}
}

func TestSubmoduleEntries(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	repo := newRepo(t)
	head := tgit(t, repo, "rev-parse", "HEAD")
	// A submodule entry points at a commit of another repository.
	other := strings.Repeat("ab", 20)
	tgit(t, repo, "update-index", "--add", "--cacheinfo", "160000,"+other+",sub")
	tgit(t, repo, "commit", "-q", "-m", "add a submodule")
	commit := tgit(t, repo, "rev-parse", "HEAD")
	r, err := s.OpenLocal(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	_, entries, err := s.ListAll(ctx, r, commit)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"100644", "blob", tgit(t, repo, "rev-parse", head+":README"), 6, "README"},
		{"160000", "commit", other, -1, "sub"},
	}
	if !slices.Equal(entries, want) {
		t.Errorf("ListAll = %+v, want %+v", entries, want)
	}
	if _, _, err := s.ReadBlob(ctx, r, commit, "sub"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadBlob(submodule): %v, want ErrNotFound", err)
	}
	if _, err := s.List(ctx, r, commit, "sub"); !errors.Is(err, ErrNotFound) {
		t.Errorf("List(submodule): %v, want ErrNotFound", err)
	}
	if _, _, err := s.ListAll(ctx, r, "main:sub"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("ListAll of a revision with a path: %v, want ErrBadArgument", err)
	}
}

// TreeBytes counts every path's file, a file twice as two, links by their
// target's length, and submodules as nothing; a tree of many files costs a
// buffer, its records arriving in pieces.
func TestTreeBytes(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	repo := newRepo(t) // README: 6 bytes
	writeFile(t, filepath.Join(repo, "a/same.txt"), "twelve bytes")
	writeFile(t, filepath.Join(repo, "b/same.txt"), "twelve bytes")
	if err := os.Symlink("a/same.txt", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		writeFile(t, filepath.Join(repo, "many", fmt.Sprintf("%s%d", strings.Repeat("n", i%40), i)), "x")
	}
	tgit(t, repo, "add", ".")
	tgit(t, repo, "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("ab", 20)+",sub")
	tgit(t, repo, "commit", "-q", "-m", "sizes")
	r, err := s.OpenLocal(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.TreeBytes(ctx, r, "HEAD")
	if want := int64(6 + 12 + 12 + len("a/same.txt") + 3000); err != nil || n != want {
		t.Fatalf("TreeBytes = %d, %v; want %d", n, err, want)
	}
	tree := tgit(t, repo, "rev-parse", "HEAD^{tree}")
	if m, err := s.TreeBytes(ctx, r, tree); err != nil || m != n {
		t.Fatalf("TreeBytes of the tree = %d, %v; want %d", m, err, n)
	}
	if _, err := s.TreeBytes(ctx, r, "--output=x"); err == nil {
		t.Fatal("an option as a revision was taken")
	}
}
