package codestore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/txwatchtest"
	"atelier/testrig/wait"
)

// TestCollectDeletesOutsideTransactions: the collector deletes objects
// from the store with no transaction open, so a slow store holds no row
// and no pooled connection. The watch (txwatch) names any git, object
// store or sandbox call made while a transaction of the pass is open.
func TestCollectDeletesOutsideTransactions(t *testing.T) {
	e := newEnv(t, localObjects(t))
	s := e.collector(t, time.Hour)
	dead := fastImport(t, e.repo, e.first, files("src", "dead", 30), true)
	if _, err := s.Publish(context.Background(), e.repo, dead); err != nil {
		t.Fatal(err)
	}
	e.age(t)
	ctx, w := txwatchtest.Attach(context.Background())
	st, err := s.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("the collection called %q inside a transaction", in)
	}
	if st.Objects == 0 || !slices.Contains(w.Seen(), "object store delete") {
		t.Fatalf("the collection deleted nothing (%+v, %q): the test no longer runs a deletion", st, w.Seen())
	}
}

// gatedDelete is an object store whose deletion of one key waits, once
// it began, until the test opens the gate.
type gatedDelete struct {
	storage.ObjectStore
	key     string
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedDelete) Delete(ctx context.Context, key string) error {
	if key == g.key {
		close(g.entered)
		<-g.gate
	}
	return g.ObjectStore.Delete(ctx, key)
}

// gitBlob is the name git gives content.
func gitBlob(content string) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00%s", len(content), content)
	return hex.EncodeToString(h.Sum(nil))
}

// TestPublishWaitsForADeletionOfItsKey: a publish that needs an object
// the collector is deleting right now waits for the deletion to end before
// it uploads the object, so the upload is never deleted under it. The
// collector's deletion of one blob is held open; a publish of a tree that
// holds the same blob must be seen waiting for a lock, and once the
// deletion ends, its tree reads back whole from the store alone.
func TestPublishWaitsForADeletionOfItsKey(t *testing.T) {
	objects := localObjects(t)
	e := newEnv(t, objects)
	ctx := context.Background()
	old := files("src", "shared", 20)
	dead := fastImport(t, e.repo, e.first, old, true)
	if _, err := e.store(t).Publish(ctx, e.repo, dead); err != nil {
		t.Fatal(err)
	}
	e.age(t)

	g := &gatedDelete{ObjectStore: objects, key: "blobs/" + gitBlob(old[7].content),
		entered: make(chan struct{}), gate: make(chan struct{})}
	// The gate opens whatever happens, so nothing is left waiting on it.
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.gate) }) }
	t.Cleanup(open)
	collector, err := codestore.New(g, e.git, e.db, e.log, codestore.Options{Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	collected := make(chan error, 1)
	go func() {
		_, err := collector.Collect(ctx)
		collected <- err
	}()
	select {
	case <-g.entered:
	case err := <-collected:
		t.Fatalf("the collection ended (%v) without deleting %s", err, g.key)
	}

	live := join(old, files("docs", "new", 3))
	commit := fastImport(t, e.repo, dead, live, true)
	published := make(chan error, 1)
	go func() {
		_, err := e.store(t).Publish(ctx, e.repo, commit)
		published <- err
	}()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	wait.For(t, wait.Long, "the publish to wait for a lock", func() bool {
		select {
		case err := <-published:
			t.Fatalf("the publish ended (%v) while the deletion of a blob it needs was under way", err)
		default:
		}
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
	open()
	if err := <-collected; err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	e.readWhole(t, commit, live)
	e.indexTellsTheTruth(t)
}
