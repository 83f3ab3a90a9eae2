package gitsvc

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// tarEntries reads an archive: name → its header and content.
func tarEntries(t *testing.T, archive []byte) map[string]struct {
	h       *tar.Header
	content string
} {
	t.Helper()
	got := map[string]struct {
		h       *tar.Header
		content string
	}{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = struct {
			h       *tar.Header
			content string
		}{h, string(b)}
	}
}

func TestArchive(t *testing.T) {
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
	var out bytes.Buffer
	if err := s.Archive(ctx, repo, commit, &out); err != nil {
		t.Fatal(err)
	}
	got := tarEntries(t, out.Bytes())
	if e := got["a/b/c.txt"]; e.h == nil || e.content != "c\r\nno newline" {
		t.Fatalf("file: %+v", e)
	}
	if e := got["run.sh"]; e.h == nil || e.h.Mode&0o100 == 0 {
		t.Fatalf("executable bit lost: %+v", e.h)
	}
	if e := got["link"]; e.h == nil || e.h.Typeflag != tar.TypeSymlink || e.h.Linkname != "a/b/c.txt" {
		t.Fatalf("symlink: %+v", e.h)
	}
	if err := s.Archive(ctx, repo, "not-a-commit", io.Discard); err == nil {
		t.Fatal("an archive of a name that is no object id was made")
	}
}

// An archive is the commit's tree as a checkout has it, whatever its
// .gitattributes ask of an export: a file marked export-ignore is in it,
// and a file marked export-subst holds its placeholders as committed.
func TestArchiveAppliesNoAttributes(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	repo, first, err := s.CreateCanonical(ctx, "attrs")
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, ".gitattributes"), []byte("hidden.txt export-ignore\nversion.txt export-subst\n"), 0o644)
	os.WriteFile(filepath.Join(src, "hidden.txt"), []byte("kept\n"), 0o644)
	os.WriteFile(filepath.Join(src, "version.txt"), []byte("$Format:%H %d$\n"), 0o644)
	commit, err := s.CommitTree(ctx, repo, src, []string{first}, "attributes")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.Archive(ctx, repo, commit, &out); err != nil {
		t.Fatal(err)
	}
	got := tarEntries(t, out.Bytes())
	if e := got["hidden.txt"]; e.h == nil || e.content != "kept\n" {
		t.Errorf("export-ignore left a file out: %+v", e)
	}
	if e := got["version.txt"]; e.content != "$Format:%H %d$\n" {
		t.Errorf("export-subst rewrote a file: %q", e.content)
	}
}
