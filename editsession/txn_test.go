package editsession

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"atelier/models"
	"atelier/projects"
	"atelier/testrig/txwatchtest"
)

// TestSavesCallNoStoreInsideATransaction: a save reads its base file
// through git, or through the object store once the base is published,
// before the session's row is locked; the transaction that holds the row
// runs SQL alone. Every kind of save is watched: a change, an addition, a
// save back to the base, a stale one, the first save through a Sessions
// that has not loaded the session yet. The watch (txwatch) names any git,
// object store or sandbox call made while a transaction of the request is
// open.
func TestSavesCallNoStoreInsideATransaction(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	loaded, err := f.sessions.Read(f.ctx, sess, "src/main.go")
	if err != nil {
		t.Fatal(err)
	}

	// The watch sees through this stack: git called inside one of the
	// store's transactions is named.
	ctx, w := txwatchtest.Attach(f.ctx)
	err = f.store.Tx(ctx, func(*models.Store) error {
		_, _, err := f.sessions.code.Read(ctx, sess.Source, "src/main.go", MaxFileBytes)
		return err
	})
	if err != nil || !hasPrefix(w.InTx(), "git ") {
		t.Fatalf("a base read inside a transaction: %v; the watch saw %q in it, want git", err, w.InTx())
	}

	save := func(s *Sessions, path, content string, cond Precondition) (string, *txwatchtest.Watch, error) {
		t.Helper()
		ctx, w := txwatchtest.Attach(f.ctx)
		_, etag, err := s.Save(ctx, f.owner, sess.ID, path, []byte(content), cond)
		if in := w.InTx(); len(in) > 0 {
			t.Errorf("saving %s called %q inside a transaction", path, in)
		}
		return etag, w, err
	}
	// The base through git.
	etag, w, err := save(f.sessions, "src/main.go", "package main // A\n", Precondition{IfMatch: loaded.ETag})
	if err != nil {
		t.Fatal(err)
	}
	if !hasPrefix(w.Seen(), "git ") {
		t.Fatalf("the save read no base through git: %q", w.Seen())
	}
	if _, _, err := save(f.sessions, "src/main.go", "package main // B\n", Precondition{IfMatch: loaded.ETag}); !errors.Is(err, ErrStale) {
		t.Fatalf("a save with the old ETag: %v, want ErrStale", err)
	}
	if _, _, err := save(f.sessions, "src/main.go", base["src/main.go"], Precondition{IfMatch: etag}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := save(f.sessions, "notes/new.txt", "new", Precondition{IfNoneMatch: "*"}); err != nil {
		t.Fatal(err)
	}
	// The base through the object store.
	canonical, err := f.git.OpenBare(projects.CanonicalName(f.owner.Project.ID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sessions.code.Publish(context.Background(), canonical, sess.BaseCommit); err != nil {
		t.Fatal(err)
	}
	if _, w, err = save(f.sessions, "crlf.txt", "one\r\ntwo\r\n", Precondition{IfMatch: ETag([]byte(base["crlf.txt"]))}); err != nil {
		t.Fatal(err)
	}
	if !hasPrefix(w.Seen(), "object store get") || hasPrefix(w.Seen(), "git ") {
		t.Fatalf("the save did not read its base from the object store alone: %q", w.Seen())
	}
	// A Sessions that never loaded the session (another instance, a
	// restart) learns its base first.
	fresh := New(Options{DB: f.store, Git: f.git, Code: f.sessions.code, Workspace: f.sessions.ws, Events: f.sessions.events,
		Config: DefaultConfig, Now: f.clock, Log: f.sessions.log})
	if _, _, err := save(fresh, "src/main.go", "package main // C\n", Precondition{IfMatch: ETag([]byte(base["src/main.go"]))}); err != nil {
		t.Fatal(err)
	}
	got, err := f.sessions.Read(f.ctx, sess, "src/main.go")
	if err != nil || string(got.Content) != "package main // C\n" {
		t.Fatalf("after the saves: %+v %v", got, err)
	}
}

func hasPrefix(calls []string, prefix string) bool {
	return slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// TestExplorerCallsNoGitInsideATransaction: the explorer's operations
// read the base's folders and files outside the transaction that holds
// the session's row, and run again with what they read when they needed
// more; the watch sees git read the base, never inside a transaction.
func TestExplorerCallsNoGitInsideATransaction(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	watched := func(what string, op func(ctx context.Context) error) {
		t.Helper()
		ctx, w := txwatchtest.Attach(f.ctx)
		if err := op(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if in := w.InTx(); len(in) > 0 {
			t.Errorf("%s called %q inside a transaction", what, in)
		}
		if !hasPrefix(w.Seen(), "git ") {
			t.Errorf("%s read nothing of the base: %q", what, w.Seen())
		}
	}
	watched("a new folder's check", func(ctx context.Context) error { return f.sessions.CheckNewFolder(ctx, sess, "docs") })
	watched("a new file", func(ctx context.Context) error {
		_, err := f.sessions.Create(ctx, sess, "docs/a.txt")
		return err
	})
	watched("a folder's rename", func(ctx context.Context) error {
		moves, err := f.sessions.Rename(ctx, sess, "src", "lib")
		if err == nil && !slices.Equal(moves, []Move{{From: "src/main.go", To: "lib/main.go"}}) {
			t.Errorf("the rename moved %v", moves)
		}
		return err
	})
	watched("a file's rename", func(ctx context.Context) error {
		_, err := f.sessions.Rename(ctx, sess, "crlf.txt", "docs/crlf.txt")
		return err
	})
	watched("a folder's deletion", func(ctx context.Context) error {
		deleted, err := f.sessions.DeleteFolder(ctx, sess, "docs")
		if err == nil && !slices.Equal(deleted, []string{"docs/a.txt", "docs/crlf.txt"}) {
			t.Errorf("the deletion deleted %q", deleted)
		}
		return err
	})
	watched("a revert", func(ctx context.Context) error { return f.sessions.Revert(ctx, sess, "src/main.go") })
	changes, err := f.sessions.Changes(f.ctx, sess)
	want := []Change{{Path: "crlf.txt", Status: Deleted}, {Path: "lib/main.go", Status: Added}}
	if err != nil || !slices.Equal(changes, want) {
		t.Fatalf("changes %v (%v), want %v", changes, err, want)
	}
	if got, err := f.sessions.Read(f.ctx, sess, "lib/main.go"); err != nil || string(got.Content) != base["src/main.go"] {
		t.Fatalf("the moved file: %+v %v", got, err)
	}
}
