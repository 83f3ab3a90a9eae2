package gitsvc

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"atelier/testrig/wait"
)

// A tree built from streamed contents holds files, executables and links
// with their modes and texts, and the links are never followed: a link to
// "/" with a file named below it cannot even be expressed.
func TestBuildTree(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")

	tree, err := s.BuildTree(ctx, r, func(b *TreeBuilder) error {
		if err := b.File("src/main.go", false, 13, strings.NewReader("package main\n")); err != nil {
			return err
		}
		if err := b.File("run.sh", true, 10, iotest.OneByteReader(strings.NewReader("#!/bin/sh\n"))); err != nil {
			return err
		}
		// Blobs written first are placed once their paths are known; one
		// never placed is in no tree.
		readme, err := b.Blob(7, strings.NewReader("# read\n"))
		if err != nil {
			return err
		}
		if _, err := b.Blob(5, strings.NewReader("stray")); err != nil {
			return err
		}
		if err := b.Place("docs/README.md", false, readme); err != nil {
			return err
		}
		return b.Link("src/up", "../run.sh")
	})
	if err != nil {
		t.Fatal(err)
	}
	got := tgit(t, r.GitDir, "ls-tree", "-r", "--format=%(objectmode) %(path)", tree)
	if want := "100644 docs/README.md\n100755 run.sh\n100644 src/main.go\n120000 src/up"; got != want {
		t.Fatalf("tree:\n%s\nwant:\n%s", got, want)
	}
	if got := tgit(t, r.GitDir, "cat-file", "blob", tree+":src/up"); got != "../run.sh" {
		t.Fatalf("link text %q", got)
	}
	if got := tgit(t, r.GitDir, "cat-file", "blob", tree+":docs/README.md"); got != "# read" {
		t.Fatalf("placed blob %q", got)
	}
	if got := tgit(t, r.GitDir, "rev-parse", "main"); got != first {
		t.Fatal("BuildTree moved main")
	}
	if _, err := s.CommitWithParents(ctx, r, tree, []string{first}, "import"); err != nil || tgit(t, r.GitDir, "rev-parse", "main^{tree}") != tree {
		t.Fatalf("commit of the built tree: %v", err)
	}

	empty, err := s.BuildTree(ctx, r, func(*TreeBuilder) error { return nil })
	if err != nil || empty != emptyTree {
		t.Fatalf("empty build: %s %v", empty, err)
	}
}

// Entries that do not make a tree are refused by the builder itself, not
// quietly dropped or replaced as git's index would; a failing feeder stops
// git before its input ends, so git leaves no crash report and no tree.
func TestBuildTreeRefusals(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	file := func(b *TreeBuilder, p string) error { return b.File(p, false, 1, strings.NewReader("x")) }
	cases := map[string]func(*TreeBuilder) error{
		".git":             func(b *TreeBuilder) error { return file(b, "a/.Git/config") },
		"dot-dot":          func(b *TreeBuilder) error { return file(b, "a/../b") },
		"absolute":         func(b *TreeBuilder) error { return file(b, "/etc/x") },
		"twice":            func(b *TreeBuilder) error { file(b, "a"); return file(b, "a") },
		"below a link":     func(b *TreeBuilder) error { b.Link("l", "."); return file(b, "l/x") },
		"below a file":     func(b *TreeBuilder) error { file(b, "f"); return b.Link("f/l", "..") },
		"file on a folder": func(b *TreeBuilder) error { file(b, "d/x"); return file(b, "d") },
		"empty link":       func(b *TreeBuilder) error { return b.Link("l", "") },
		"no such blob":     func(b *TreeBuilder) error { return b.Place("a", false, 1) },
		"negative size":    func(b *TreeBuilder) error { _, err := b.Blob(-1, strings.NewReader("")); return err },
		"placed on a placed path": func(b *TreeBuilder) error {
			blob, _ := b.Blob(1, strings.NewReader("x"))
			b.Place("a", false, blob)
			return b.Place("a", true, blob)
		},
	}
	for name, add := range cases {
		if _, err := s.BuildTree(ctx, r, add); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%s: %v, want ErrBadArgument", name, err)
		}
	}

	short := func(b *TreeBuilder) error { return b.File("a", false, 100, strings.NewReader("only this")) }
	if _, err := s.BuildTree(ctx, r, short); !errors.Is(err, io.EOF) {
		t.Errorf("content shorter than its size: %v", err)
	}
	boom := errors.New("the archive broke")
	failing := func(b *TreeBuilder) error {
		return b.File("a", false, 1<<20, io.MultiReader(strings.NewReader(strings.Repeat("x", 512<<10)), iotest.ErrReader(boom)))
	}
	if _, err := s.BuildTree(ctx, r, failing); !errors.Is(err, boom) {
		t.Errorf("failing content: %v", err)
	}
	crashes, _ := filepath.Glob(filepath.Join(r.GitDir, "fast_import_crash_*"))
	if len(crashes) != 0 {
		t.Errorf("git wrote crash reports: %v", crashes)
	}
	if left, _ := os.ReadDir(s.tmp); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A build that fails after git has begun writing its pack leaves nothing
// in the repository's objects: the temporary pack goes with the build.
func TestBuildTreeFailureLeavesNoObjects(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	objects := func() []string {
		var names []string
		filepath.WalkDir(filepath.Join(r.GitDir, "objects"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				names = append(names, strings.TrimPrefix(p, r.GitDir))
			}
			return err
		})
		return names
	}
	before := objects()
	boom := errors.New("the archive broke")
	_, err := s.BuildTree(ctx, r, func(b *TreeBuilder) error {
		noise := make([]byte, 4<<20) // incompressible, so the pack grows
		rand.Read(noise)
		if err := b.File("first.bin", false, int64(len(noise)), bytes.NewReader(noise)); err != nil {
			return err
		}
		if err := b.out.Flush(); err != nil {
			return err
		}
		// Fail only once git is writing the first file into its pack.
		if !wait.Until(wait.Long, func() bool {
			tmp, _ := filepath.Glob(filepath.Join(r.GitDir, "objects", "pack", "tmp_pack_*"))
			return len(tmp) > 0
		}) {
			return errors.New("git never began a pack")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("the failing build: %v", err)
	}
	if after := objects(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("objects after a failed build: %v, before: %v", after, before)
	}
}

// Building a tree takes as long as its contents take to arrive, past the
// timeout of ordinary git commands: a large import is not cut short.
func TestBuildTreeOutlastsTheCommandTimeout(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, func(c *Config) { c.Timeout = time.Second })
	r, _ := mustCreate(t, s, "slow")
	tree, err := s.BuildTree(ctx, r, func(b *TreeBuilder) error {
		if err := b.File("first.txt", false, 6, strings.NewReader("first\n")); err != nil {
			return err
		}
		// Not a wait: the build itself must last past the command timeout,
		// as when a large file is on its way.
		time.Sleep(2500 * time.Millisecond)
		return b.File("second.txt", false, 7, strings.NewReader("second\n"))
	})
	if err != nil {
		t.Fatalf("a build longer than the command timeout: %v", err)
	}
	if got := tgit(t, r.GitDir, "ls-tree", "--name-only", tree); got != "first.txt\nsecond.txt" {
		t.Fatalf("tree: %q", got)
	}
}
