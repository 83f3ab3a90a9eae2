package storage_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"atelier/internal/txwatch"
	"atelier/storage"
	"atelier/testrig/miniotest"
	"atelier/testrig/txwatchtest"
)

// Every call of an object store, local or S3, notes itself to a watch, so
// a test sees one made while a transaction of its request is open.
func TestCallsNoteThemselves(t *testing.T) {
	l, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("local", func(t *testing.T) {
		notes(t, l, func(ctx context.Context) error {
			if err := l.PutBatched(ctx, "blobs/ef", strings.NewReader("z"), 1); err != nil {
				return err
			}
			return l.Sync(ctx)
		}, "object store put", "object store sync")
	})
	t.Run("s3", func(t *testing.T) {
		srv := miniotest.Start(t)
		notes(t, newS3(t, srv.Config(newBucket())), nil)
	})
}

// notes makes every call of s, and more's, inside a transaction of a
// watched context, then one after it; the watch must name each as made.
func notes(t *testing.T, s storage.ObjectStore, more func(context.Context) error, moreNotes ...string) {
	ctx, w := txwatchtest.Attach(context.Background())
	end := txwatch.Begin(ctx)
	if err := s.Put(ctx, "blobs/ab", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "blobs/ab"); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(ctx, "blobs/ab")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	if err := s.Delete(ctx, "blobs/ab"); err != nil {
		t.Fatal(err)
	}
	if more != nil {
		if err := more(ctx); err != nil {
			t.Fatal(err)
		}
	}
	end()
	if _, err := s.Stat(ctx, "blobs/ab"); err == nil {
		t.Fatal("the deleted object is still there")
	}
	want := append([]string{"object store put", "object store stat", "object store get", "object store delete"}, moreNotes...)
	if got := w.InTx(); !slices.Equal(got, want) {
		t.Errorf("noted inside the transaction %q, want %q", got, want)
	}
	if got := w.Seen(); len(got) != len(want)+1 {
		t.Errorf("noted %q, want the stat after the transaction too", got)
	}
}
