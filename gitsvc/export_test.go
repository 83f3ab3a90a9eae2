package gitsvc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestExport(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	repo, first, err := s.CreateCanonical(ctx, "exp")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "b", "c.txt"), []byte("c\r\nno newline"), 0o644)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("a/b/c.txt", filepath.Join(src, "link"))
	commit, err := s.CommitTree(ctx, repo, src, []string{first}, "tree")
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := s.Export(ctx, repo, commit, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a", "b", "c.txt")); err != nil || string(b) != "c\r\nno newline" {
		t.Fatalf("file: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("executable bit lost: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "a/b/c.txt" {
		t.Fatalf("symlink: %q %v", target, err)
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 3 {
		t.Fatalf("exported %d entries, want 3", len(entries))
	}
}
