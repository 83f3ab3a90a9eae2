package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atelier/storage"
	"atelier/testrig/storagetest"
)

func TestLocal(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.ObjectStore {
		return newLocal(t, t.TempDir())
	})
}

func newLocal(t *testing.T, dir string) *storage.Local {
	t.Helper()
	l, err := storage.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// large is an object too large for a pack: a file of its own.
func large(key string) string { return key + strings.Repeat(".", 1<<20) }

// The files are where Local's comment says, private, and nothing else is
// there: no temporary file outlives a Put, failed or not. Small objects
// are in the pack, not files of their own.
func TestLocalLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects") // NewLocal creates it
	l := newLocal(t, dir)
	ctx := context.Background()
	objects := map[string]string{
		"blobs/3fa9c1": "blobs/3f/3fa9c1",
		"trees/a":      "trees/a/a",
		"x":            "x/x",
		"a/b/cd":       "a/b/cd/cd",
	}
	for key := range objects {
		if err := l.Put(ctx, key, strings.NewReader(large(key)), int64(len(large(key)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Put(ctx, "blobs/small", strings.NewReader("small"), 5); err != nil {
		t.Fatal(err)
	}
	// Failed Puts, which must leave nothing.
	if err := l.Put(ctx, "blobs/3fb0", strings.NewReader(large("short")), int64(len(large("short")))+1); !errors.Is(err, storage.ErrSizeMismatch) {
		t.Fatalf("short Put: %v", err)
	}
	if err := l.Put(ctx, "blobs/3fa9c1", strings.NewReader("too long"), 3); !errors.Is(err, storage.ErrSizeMismatch) {
		t.Fatalf("long Put over an object: %v", err)
	}
	if err := l.Put(ctx, "blobs/3fb1", strings.NewReader("short"), 6); !errors.Is(err, storage.ErrSizeMismatch) {
		t.Fatalf("short small Put: %v", err)
	}

	got := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if perm := fi.Mode().Perm(); perm != 0o700 {
				t.Errorf("folder %s has mode %v, want 0700", path, perm)
			}
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got[filepath.ToSlash(rel)] = string(data)
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("file %s has mode %v, want 0600", rel, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"~packs/lock": ""}
	for key, file := range objects {
		want[file] = large(key)
	}
	pack := got["~packs/0.pack"]
	delete(got, "~packs/0.pack")
	if strings.Count(pack, "blobs/small") != 1 || strings.Contains(pack, "blobs/3fb1") {
		t.Errorf("the pack holds %q, want the small object's record alone", pack)
	}
	if len(got) != len(want) {
		t.Errorf("files under the store: %d, want %d", len(got), len(want))
	}
	for file, content := range want {
		if got[file] != content {
			t.Errorf("file %s holds %d bytes, want %d", file, len(got[file]), len(content))
		}
	}
}

// A failed Put that had to create folders leaves no file in them, and a
// later Put of the same key works.
func TestLocalPutAfterFailure(t *testing.T) {
	dir := t.TempDir()
	l := newLocal(t, dir)
	ctx := context.Background()
	data := bytes.Repeat([]byte("z"), 2<<20)
	if err := l.Put(ctx, "new/folder/zz", bytes.NewReader(data), int64(len(data))+1); !errors.Is(err, storage.ErrSizeMismatch) {
		t.Fatalf("short Put: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "new", "folder", "zz"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("after a failed Put the object's folder holds %v (%v), want nothing", entries, err)
	}
	if err := l.Put(ctx, "new/folder/zz", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if size, err := l.Stat(ctx, "new/folder/zz"); err != nil || size != int64(len(data)) {
		t.Fatalf("Stat = %d, %v", size, err)
	}
}

// A key's file name taken by a folder (another key lives below it) makes
// Put fail, and Delete leaves the folder and what is in it alone.
func TestLocalKeyOverFolder(t *testing.T) {
	l := newLocal(t, t.TempDir())
	ctx := context.Background()
	if err := l.Put(ctx, "k/ab/abc", strings.NewReader(large("below")), int64(len(large("below")))); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, "k/ab", strings.NewReader(large("over")), int64(len(large("over")))); err == nil {
		t.Error("Put of a key whose file is a folder succeeded")
	}
	if err := l.Delete(ctx, "k/ab"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := l.Stat(ctx, "k/ab/abc"); err != nil {
		t.Errorf("the object below: %v", err)
	}
}

func TestNewLocal(t *testing.T) {
	if _, err := storage.NewLocal(""); err == nil {
		t.Error("NewLocal(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := storage.NewLocal(file); err == nil {
		t.Error("NewLocal over a file succeeded")
	}
	// A relative folder is made absolute once, so a later chdir does not
	// move the store.
	t.Chdir(t.TempDir())
	l := newLocal(t, "rel")
	ctx := context.Background()
	if err := l.Put(ctx, "a", strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if _, err := l.Stat(ctx, "a"); err != nil {
		t.Errorf("after chdir: %v", err)
	}
}

// batched is a Local whose every Put is batched.
type batched struct{ *storage.Local }

func (b batched) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return b.PutBatched(ctx, key, r, size)
}

// PutBatched keeps every promise of Put to readers (whole or absent, exact
// sizes, nothing left of a failed one): the store's whole suite passes with
// every Put batched, and the Sync at the end succeeds.
func TestLocalBatched(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.ObjectStore {
		l := newLocal(t, t.TempDir())
		t.Cleanup(func() {
			if err := l.Sync(context.Background()); err != nil {
				t.Errorf("sync: %v", err)
			}
		})
		return batched{l}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := newLocal(t, t.TempDir()).Sync(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync after the request went away: %v", err)
	}
}
