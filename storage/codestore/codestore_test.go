package codestore_test

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/gitsvc"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/miniotest"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A second publish after changing 3 files of a 10,000-file tree stores the 3
// blobs and the trees above them, nothing else.
func TestPublishIsIncremental(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	files := tree(10, 50, 20)
	c1 := fastImport(t, e.repo, e.first, files, true)
	s := e.store(t)
	st, err := s.Publish(ctx, e.repo, c1)
	if err != nil {
		t.Fatal(err)
	}
	// 10,000 distinct blobs; trees: root + 10 + 500.
	if st.Blobs != 10_000 || st.Trees != 511 || st.SkippedBlobs != 0 {
		t.Fatalf("first publish: %+v", st)
	}
	changed := []file{
		{"d001/s002/f003.txt", "changed one\n"},
		{"d001/s002/f004.txt", "changed two\n"},
		{"d007/s040/f000.txt", "changed three\n"},
	}
	c2 := fastImport(t, e.repo, c1, changed, false)
	st, err = s.Publish(ctx, e.repo, c2)
	if err != nil {
		t.Fatal(err)
	}
	// Changed trees: root, d001, d001/s002, d007, d007/s040.
	if st.Blobs != 3 || st.Trees != 5 || st.SkippedBlobs != 10_000-3 || st.SkippedTrees != 511-5 {
		t.Fatalf("incremental publish: %+v", st)
	}
	// Publishing a published commit does nothing.
	if st, err = s.Publish(ctx, e.repo, c2); err != nil || st != (codestore.Stats{}) {
		t.Fatalf("republish: %+v %v", st, err)
	}
	// The new commit reads the new content, the old one the old.
	for commit, want := range map[string]string{c1: "content of d001/s002/f003.txt\n", c2: "changed one\n"} {
		data, size, err := e.store(t).Read(ctx, codestore.Source{Repo: e.repo, Commit: commit}, "d001/s002/f003.txt", 1<<20)
		if err != nil || string(data) != want || size != int64(len(want)) {
			t.Fatalf("read at %s: %q %d %v", commit[:7], data, size, err)
		}
	}
}

// A published commit is read from the object store alone: with git broken,
// listings and files still come back.
func TestReadsComeFromTheObjectStore(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	commit := fastImport(t, e.repo, e.first, []file{
		{"README.md", "# hello\n"}, {"src/main.go", "package main\n"}, {"src/util/x.go", "package util\n"},
	}, true)
	if _, err := e.store(t).Publish(ctx, e.repo, commit); err != nil {
		t.Fatal(err)
	}
	broken, err := gitsvc.New(gitsvc.Config{Root: t.TempDir(), GitPath: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := codestore.New(e.objects, broken, e.db, e.log, codestore.Options{CachedTrees: 10})
	if err != nil {
		t.Fatal(err)
	}
	src := codestore.Source{Repo: e.repo, Commit: commit}
	es, err := s.List(ctx, src, "")
	if err != nil || len(es) != 2 || es[0].Name != "src" || es[0].Kind != codestore.KindDir || es[1].Name != "README.md" || es[1].Size != 8 {
		t.Fatalf("root listing without git: %+v %v", es, err)
	}
	es, err = s.List(ctx, src, "src/util")
	if err != nil || len(es) != 1 || es[0].Name != "x.go" {
		t.Fatalf("nested listing without git: %+v %v", es, err)
	}
	data, _, err := s.Read(ctx, src, "src/main.go", 1<<20)
	if err != nil || string(data) != "package main\n" {
		t.Fatalf("file without git: %q %v", data, err)
	}
	for _, missing := range []string{"nope", "src/nope", "README.md/x"} {
		if _, err := s.List(ctx, src, missing); !errors.Is(err, codestore.ErrNotFound) {
			t.Errorf("List %q: %v, want ErrNotFound", missing, err)
		}
	}
	if _, _, err := s.Read(ctx, src, "src", 10); !errors.Is(err, codestore.ErrIsDir) {
		t.Errorf("reading a folder: %v", err)
	}
}

// When the object store loses an object, or is not published yet, git
// answers instead.
func TestReadsFallBackToGit(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	commit := fastImport(t, e.repo, e.first, []file{{"a/b.txt", "bee\n"}, {"c.txt", "sea\n"}}, true)
	src := codestore.Source{Repo: e.repo, Commit: commit}

	// Not published: git answers.
	es, err := e.store(t).List(ctx, src, "a")
	if err != nil || len(es) != 1 || es[0].Name != "b.txt" || es[0].Size != 4 {
		t.Fatalf("unpublished listing: %+v %v", es, err)
	}
	if _, err := e.store(t).Publish(ctx, e.repo, commit); err != nil {
		t.Fatal(err)
	}
	// Delete every blob from the store behind the index's back.
	out, err := exec.Command("git", "--git-dir", e.repo.GitDir, "rev-parse", commit+":c.txt").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.objects.Delete(ctx, "blobs/"+strings.TrimSpace(string(out))); err != nil {
		t.Fatal(err)
	}
	data, size, err := e.store(t).Read(ctx, src, "c.txt", 1<<20)
	if err != nil || string(data) != "sea\n" || size != 4 {
		t.Fatalf("read of a lost blob: %q %v", data, err)
	}
}

// The S3 backend against a real MinIO: publish, read cold from S3, then kill
// MinIO and read again, cold, through git — quickly, not after minutes of
// retries.
func TestS3AndMinIOGoingAway(t *testing.T) {
	minio := miniotest.Start(t)
	ctx := context.Background()
	objects, err := storage.NewS3(ctx, minio.Config("code"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, objects)
	commit := fastImport(t, e.repo, e.first, tree(2, 3, 4), true)
	st, err := e.store(t).Publish(ctx, e.repo, commit)
	if err != nil || st.Blobs != 24 || st.Trees != 9 {
		t.Fatalf("publish to S3: %+v %v", st, err)
	}
	src := codestore.Source{Repo: e.repo, Commit: commit}
	want, err := e.store(t).List(ctx, src, "d001/s002")
	if err != nil || len(want) != 4 {
		t.Fatalf("cold listing from S3: %+v %v", want, err)
	}
	if _, err := objects.Stat(ctx, "trees/"+mustRev(t, e.repo, commit+":d001/s002")); err != nil {
		t.Fatalf("the tree is not in S3: %v", err)
	}

	minio.Kill()
	start := time.Now()
	s := e.store(t)
	got, err := s.List(ctx, src, "d001/s002")
	if err != nil || len(got) != len(want) || got[0] != want[0] {
		t.Fatalf("listing with MinIO gone: %+v %v", got, err)
	}
	data, _, err := s.Read(ctx, src, "d001/s002/f003.txt", 1<<20)
	if err != nil || string(data) != "content of d001/s002/f003.txt\n" {
		t.Fatalf("file with MinIO gone: %q %v", data, err)
	}
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Fatalf("falling back took %v", elapsed)
	}
	if _, err := objects.Stat(ctx, "trees/x"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a dead store must not look like a missing object: %v", err)
	}
}

func mustRev(t *testing.T, repo *gitsvc.Repo, rev string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", repo.GitDir, "rev-parse", rev).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// Identical folders at different depths collapse into one tree, which must
// still be stored before every tree that names it.
func TestPublishSharedSubtrees(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	commit := fastImport(t, e.repo, e.first, []file{
		{"lib/x.txt", "same\n"},
		{"a/b/c/lib/x.txt", "same\n"},
		{"a/lib/x.txt", "same\n"},
	}, true)
	st, err := e.store(t).Publish(ctx, e.repo, commit)
	// Distinct trees: root, lib (shared 3×), a, a/b, a/b/c.
	if err != nil || st.Trees != 5 || st.Blobs != 1 {
		t.Fatalf("publish: %+v %v", st, err)
	}
	broken, _ := gitsvc.New(gitsvc.Config{Root: t.TempDir(), GitPath: "/bin/false"})
	s, _ := codestore.New(e.objects, broken, e.db, e.log, codestore.Options{CachedTrees: 10})
	for _, dir := range []string{"lib", "a/lib", "a/b/c/lib"} {
		es, err := s.List(ctx, codestore.Source{Repo: e.repo, Commit: commit}, dir)
		if err != nil || len(es) != 1 || es[0].Name != "x.txt" {
			t.Fatalf("%s from the store alone: %+v %v", dir, es, err)
		}
	}
}

// Publishes of one commit at once (an import's and the server's retry
// pass) store each object once between them: the later ones wait for the
// first instead of uploading the same tree beside it.
func TestConcurrentPublishesShareOneRun(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	commit := fastImport(t, e.repo, e.first, tree(4, 25, 20), true)
	s := e.store(t)
	const n = 4
	stats := make([]codestore.Stats, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i], errs[i] = s.Publish(ctx, e.repo, commit)
		}()
	}
	wg.Wait()
	blobs, trees := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("publish %d: %v", i, errs[i])
		}
		blobs += stats[i].Blobs
		trees += stats[i].Trees
	}
	// 2,000 blobs; trees: root + 4 + 100.
	if blobs != 2000 || trees != 105 {
		t.Fatalf("%d publishes at once stored %d blobs and %d trees in all, want 2000 and 105: %+v", n, blobs, trees, stats)
	}
}
