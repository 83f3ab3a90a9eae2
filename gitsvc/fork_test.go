package gitsvc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A fork shares the canonical objects instead of copying them, reads the
// base commit's files, and takes its own commits without touching canonical.
func TestFork(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	canon, _, err := s.CreateCanonical(ctx, "canon")
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := s.Head(ctx, canon)
	dir := t.TempDir()
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	base, err := s.CommitTree(ctx, canon, dir, []string{head}, "files")
	if err != nil {
		t.Fatal(err)
	}

	fork, err := s.Fork(ctx, canon, base, "edit-0123")
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.Head(ctx, fork); err != nil || got != base {
		t.Fatalf("fork head %s %v, want %s", got, err, base)
	}
	data, _, err := s.ReadBlob(ctx, fork, base, "a.txt")
	if err != nil || string(data) != "a\n" {
		t.Fatalf("read through the fork: %q %v", data, err)
	}
	var forkBytes int64
	filepath.WalkDir(fork.GitDir, func(_ string, d fs.DirEntry, _ error) error {
		if fi, err := d.Info(); err == nil && !d.IsDir() {
			forkBytes += fi.Size()
		}
		return nil
	})
	if forkBytes > 256<<10 {
		t.Fatalf("the fork holds %d bytes: it copied objects instead of sharing them", forkBytes)
	}

	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("changed\n"), 0o644)
	if _, err := s.CommitTree(ctx, fork, dir, []string{base}, "in the fork"); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Head(ctx, canon); got != base {
		t.Fatal("a commit in the fork moved canonical")
	}
	if _, err := s.Fork(ctx, canon, base, "edit-0123"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("forking onto an existing name: %v", err)
	}
	if err := s.RemoveRepo(ctx, "edit-0123"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fork.GitDir); !os.IsNotExist(err) {
		t.Fatal("the fork survived RemoveRepo")
	}
	if _, _, err := s.ReadBlob(ctx, canon, base, "a.txt"); err != nil {
		t.Fatalf("removing the fork hurt canonical: %v", err)
	}
}
