package gitsvc

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// batchFixture commits n small files and answers their blobs' hashes and
// contents, in one order.
func batchFixture(t *testing.T, s *Service, n int) (*Repo, []string, []string) {
	t.Helper()
	ctx := testContext(t)
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	for i := range n {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("d%02d", i%20), fmt.Sprintf("f%04d", i)), fmt.Sprintf("file %d\n", i))
	}
	commit, err := s.CommitTree(ctx, r, dir, []string{first}, "files")
	if err != nil {
		t.Fatal(err)
	}
	_, all, err := s.ListAll(ctx, r, commit)
	if err != nil {
		t.Fatal(err)
	}
	var shas, contents []string
	for _, e := range all {
		if e.Type == "blob" {
			var i int
			fmt.Sscanf(filepath.Base(e.Path), "f%d", &i)
			shas, contents = append(shas, e.SHA), append(contents, fmt.Sprintf("file %d\n", i))
		}
	}
	if len(shas) != n {
		t.Fatalf("%d blobs, want %d", len(shas), n)
	}
	return r, shas, contents
}

// ReadEach hands over every object asked for, in order, though the names
// go to git ahead of the answers; what stops it (a missing object, the
// reader's own error) is what it returns, and the Batch is broken after.
func TestBatchReadEach(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, shas, contents := batchFixture(t, s, 3000)

	b, err := s.OpenBatch(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	err = b.ReadEach(shas, func(i int, typ string, data []byte) error {
		if i != next || typ != "blob" || string(data) != contents[i] {
			return fmt.Errorf("object %d (expected %d): %s %q, want %q", i, next, typ, data, contents[i])
		}
		next++
		return nil
	})
	if err != nil || next != len(shas) {
		t.Fatalf("ReadEach: %v after %d of %d objects", err, next, len(shas))
	}
	// In step after it: a Read of one more works.
	if _, data, err := b.Read(shas[7]); err != nil || string(data) != contents[7] {
		t.Fatalf("Read after ReadEach = %q, %v", data, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// A missing object in the middle: ErrNotFound, and the Batch is
	// broken, since the objects after it were asked for already.
	b, err = s.OpenBatch(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	names := append(append(append([]string{}, shas[:100]...), strings.Repeat("1", 40)), shas[100:]...)
	got := 0
	err = b.ReadEach(names, func(int, string, []byte) error { got++; return nil })
	if !errors.Is(err, ErrNotFound) || got != 100 {
		t.Fatalf("ReadEach past a missing object: %v after %d objects, want ErrNotFound after 100", err, got)
	}
	if _, _, err := b.Read(shas[0]); err == nil {
		t.Fatal("Read on a Batch out of step worked")
	}
	b.Close()

	// The reader's own error stops the reading at once.
	b, err = s.OpenBatch(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	enough := errors.New("enough")
	got = 0
	err = b.ReadEach(shas, func(i int, _ string, _ []byte) error {
		got++
		if i == 10 {
			return enough
		}
		return nil
	})
	if !errors.Is(err, enough) || got != 11 {
		t.Fatalf("ReadEach stopped by its reader: %v after %d objects", err, got)
	}
	b.Close()

	if err := b.ReadEach([]string{"a\nb"}, nil); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("ReadEach with a newline: %v, want ErrBadArgument", err)
	}
}
