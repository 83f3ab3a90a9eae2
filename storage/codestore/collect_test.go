package codestore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/miniotest"
)

// backend is an object store and what it really holds: the bytes of a
// local store's objects (Local.Usage), or of the objects MinIO lists.
type backend struct {
	objects storage.ObjectStore
	weigh   func(t *testing.T) int64
}

// eachBackend runs f on a local store and on a real MinIO.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("Local", func(t *testing.T) {
		dir := t.TempDir()
		objects, err := storage.NewLocal(dir)
		if err != nil {
			t.Fatal(err)
		}
		f(t, backend{objects: objects, weigh: func(t *testing.T) int64 {
			t.Helper()
			n, err := objects.Usage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}})
	})
	t.Run("MinIO", func(t *testing.T) {
		srv := miniotest.Start(t)
		objects, err := storage.NewS3(context.Background(), srv.Config("code"))
		if err != nil {
			t.Fatal(err)
		}
		f(t, backend{objects: objects, weigh: func(t *testing.T) int64 {
			t.Helper()
			_, n, err := srv.Usage(context.Background(), "code")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}})
	})
}

// collector is a code store whose grace is short enough to wait out.
func (e *env) collector(t *testing.T, grace time.Duration) *codestore.Store {
	t.Helper()
	s, err := codestore.New(e.objects, e.git, e.db, e.log, codestore.Options{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// age makes every object and published commit two hours older, as if that
// time had passed for them: past the grace of an hour the tests use.
func (e *env) age(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE stored_objects SET used_at = used_at - interval '2 hours'`,
		`UPDATE published_commits SET published_at = published_at - interval '2 hours'`,
	} {
		if err := e.db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// project makes a Container project row whose canonical commit is commit.
func (e *env) project(t *testing.T, name, commit string) int64 {
	t.Helper()
	ctx := context.Background()
	owner := &models.User{Username: "owner-" + name, PasswordHash: "x"}
	if err := e.db.CreateUser(ctx, owner); err != nil {
		t.Fatal(err)
	}
	p := &models.Project{Name: name, WorkspaceDirName: name, WorkspaceMode: models.ModeContainer}
	if err := e.db.CreateProject(ctx, p, owner.ID); err != nil {
		t.Fatal(err)
	}
	e.setCanonical(t, p.ID, commit)
	return p.ID
}

func (e *env) setCanonical(t *testing.T, id int64, commit string) {
	t.Helper()
	if err := e.db.SetCanonicalCommit(context.Background(), id, commit); err != nil {
		t.Fatal(err)
	}
}

// readWhole reads every file of commit from the object store alone (git is
// broken for the reader) and compares it with what was committed.
func (e *env) readWhole(t *testing.T, commit string, files []file) {
	t.Helper()
	ctx := context.Background()
	broken, err := gitsvc.New(gitsvc.Config{Root: t.TempDir(), GitPath: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := codestore.New(e.objects, broken, e.db, e.log, codestore.Options{CachedTrees: 10})
	if err != nil {
		t.Fatal(err)
	}
	src := codestore.Source{Repo: e.repo, Commit: commit}
	for _, f := range files {
		data, _, err := s.Read(ctx, src, f.path, 1<<20)
		if err != nil || string(data) != f.content {
			t.Fatalf("%s of %s from the store alone: %q, %v", f.path, commit[:7], data, err)
		}
	}
}

// files makes n files below dir whose content names tag, so trees of
// different tags share nothing.
func files(dir, tag string, n int) []file {
	fs := make([]file, n)
	for i := range fs {
		p := fmt.Sprintf("%s/f%03d.txt", dir, i)
		fs[i] = file{p, fmt.Sprintf("%s: %s\n", tag, p)}
	}
	return fs
}

func join(parts ...[]file) []file {
	var all []file
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// A project imported twice, then deleted and collected, leaves the store
// as it was before it: its two trees go, and what it shared with a
// project that lives on stays and reads back whole.
func TestCollectFreesADeletedProject(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b.objects)
		ctx := context.Background()
		s := e.collector(t, time.Hour)

		shared := files("vendor/lib", "shared", 20)
		keep := join(shared, files("keep", "keep", 30))
		kc := fastImport(t, e.repo, e.first, keep, true)
		e.project(t, "keeper", kc)
		if _, err := s.Publish(ctx, e.repo, kc); err != nil {
			t.Fatal(err)
		}
		before := b.weigh(t)

		first := join(shared, files("src", "first", 40))
		c1 := fastImport(t, e.repo, kc, first, true)
		victim := e.project(t, "victim", c1)
		if _, err := s.Publish(ctx, e.repo, c1); err != nil {
			t.Fatal(err)
		}
		second := join(shared, files("src", "second", 40), files("docs", "second", 10))
		c2 := fastImport(t, e.repo, c1, second, true)
		e.setCanonical(t, victim, c2)
		if _, err := s.Publish(ctx, e.repo, c2); err != nil {
			t.Fatal(err)
		}
		imported := b.weigh(t)
		if imported <= before {
			t.Fatalf("two imports stored nothing: %d then %d bytes", before, imported)
		}

		// Once the first tree is past the grace, a collection frees what
		// only it held, and the live trees stay whole.
		e.age(t)
		st, err := s.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		afterFirst := b.weigh(t)
		if st.Objects == 0 || st.Unpublished != 1 || afterFirst >= imported || afterFirst <= before {
			t.Fatalf("with the second tree canonical: %+v, %d bytes (before %d, imported %d)", st, afterFirst, before, imported)
		}
		e.readWhole(t, c2, second)
		e.readWhole(t, kc, keep)

		if err := e.db.DeleteProject(ctx, victim); err != nil {
			t.Fatal(err)
		}
		if st, err = s.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		if after := b.weigh(t); after != before {
			t.Fatalf("after deleting and collecting: %d bytes, want %d as before the imports (%+v)", after, before, st)
		}
		totals, err := e.db.StoredTotals(ctx)
		if err != nil || totals.Bytes != before {
			t.Fatalf("the index says %+v (%v), want %d bytes", totals, err, before)
		}
		e.readWhole(t, kc, keep)
		// A second pass finds nothing more.
		if st, err = s.Collect(ctx); err != nil || st.Objects != 0 {
			t.Fatalf("second pass: %+v %v", st, err)
		}
	})
}

// Nothing younger than the grace is swept, even when no tree names it:
// what a publish in flight stored before it records its commit, say.
func TestCollectSparesYoungObjects(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	s := e.collector(t, time.Hour)
	tree := files("src", "young", 10)
	c := fastImport(t, e.repo, e.first, tree, true)
	if _, err := s.Publish(ctx, e.repo, c); err != nil {
		t.Fatal(err)
	}
	st, err := s.Collect(ctx)
	if err != nil || st.Objects != 0 || st.Unpublished != 0 || st.Due.IsZero() {
		t.Fatalf("collection of a young, dead tree: %+v %v", st, err)
	}
	if until := time.Until(st.Due); until < 59*time.Minute || until > 61*time.Minute {
		t.Fatalf("the next pass that frees something is due in %v, want an hour", until)
	}
	e.readWhole(t, c, tree)
}

// A collection that runs while a publish is in flight never takes an
// object the publish counts on. Each round leaves a dead tree past the
// grace, then publishes a live one that shares most of it (unchanged
// folders, whose blobs a publish trusts once it has claimed the folder,
// and files moved to new folders) while collections run back to back;
// every published tree must read back whole from the store alone, and
// every object the index names must be in the store.
func TestCollectBesidePublishes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b.objects)
		ctx := context.Background()
		s := e.collector(t, time.Hour)
		live := e.project(t, "live", e.first)
		parent := e.first
		var collected int
		for round := range 20 {
			tag := fmt.Sprintf("round %d", round)
			lib := files("lib", tag, 40)
			dead := join(lib, files("deep/a/b", tag, 20), files("old", tag, 20))
			d := fastImport(t, e.repo, parent, dead, true)
			if _, err := s.Publish(ctx, e.repo, d); err != nil {
				t.Fatal(err)
			}
			e.age(t)

			moved := files("deep/a/b", tag, 20)
			for i := range moved {
				moved[i].path = "moved/" + moved[i].path
			}
			next := join(lib, moved, files("new", tag, 20))
			c := fastImport(t, e.repo, d, next, true)
			e.setCanonical(t, live, c)
			parent = c

			// Collections back to back from before the publish starts
			// until after it has ended.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					st, err := s.Collect(ctx)
					if err != nil {
						t.Errorf("collect: %v", err)
						return
					}
					collected += st.Objects
					select {
					case <-stop:
						return
					default:
					}
				}
			}()
			_, err := s.Publish(ctx, e.repo, c)
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("%s: publish: %v", tag, err)
			}
			e.readWhole(t, c, next)
			e.indexTellsTheTruth(t)
		}
		if collected == 0 {
			t.Fatal("the collections beside the publishes deleted nothing: the race was not run")
		}
	})
}

// indexTellsTheTruth checks that every object stored_objects names is in
// the store.
func (e *env) indexTellsTheTruth(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT key FROM stored_objects`)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := e.objects.Stat(ctx, k); err != nil {
			t.Fatalf("the index names %s, which the store lacks: %v", k, err)
		}
	}
}

// A publish that outlives the grace records nothing: what it claimed may be
// swept by then, so a stored tree would name objects that are gone.
func TestPublishPastTheGraceRecordsNothing(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	s := e.collector(t, time.Millisecond)
	c := fastImport(t, e.repo, e.first, files("src", "slow", 20), true)
	if _, err := s.Publish(ctx, e.repo, c); !errors.Is(err, codestore.ErrPublishTooSlow) {
		t.Fatalf("a publish slower than the grace: %v", err)
	}
	if _, err := e.db.PublishedRoot(ctx, c); !errors.Is(err, models.ErrNotFound) {
		t.Fatalf("the commit counts as published: %v", err)
	}
	if totals, err := e.db.StoredTotals(ctx); err != nil || totals.Objects != 0 {
		t.Fatalf("the index holds %+v (%v), want nothing", totals, err)
	}
}

// Marking a 100,000-file tree keeps the marks in PostgreSQL: the heap
// holds a walk's stack and a few trees, not a set of every key.
func TestCollectMarksInBoundedMemory(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	c := fastImport(t, e.repo, e.first, tree(50, 100, 20), true)
	start := time.Now()
	if _, err := e.store(t).Publish(ctx, e.repo, c); err != nil {
		t.Fatal(err)
	}
	t.Logf("published 100,000 files in %v", time.Since(start))
	e.project(t, "large", c)
	s := e.collector(t, time.Hour)
	// The collector lets garbage grow up to the live heap before it
	// runs, and the local store's index of 105,052 packed objects is
	// ~10 MiB of live heap: collected often, the peak shows what marking
	// holds rather than what it has let go of.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	start = time.Now()
	st, err := s.Collect(ctx)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 blobs, 5,051 trees and the path index.
	if st.Marked != 105_052 || st.Objects != 0 {
		t.Fatalf("collection: %+v", st)
	}
	growth := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("marked %d keys in %v; the heap grew by %d KiB at most", st.Marked, time.Since(start), growth>>10)
	if growth > 8<<20 {
		t.Fatalf("the heap grew by %d MiB while marking", growth>>20)
	}
}
