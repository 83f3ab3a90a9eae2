package gitsvc

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteBlobStreams: a blob larger than MaxOutput reaches the writer
// whole (it is streamed, not buffered), a missing blob is ErrNotFound and
// names that could be flags or revisions are refused before git runs.
func TestWriteBlobStreams(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, func(c *Config) { c.MaxOutput = 1000 })
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	big := strings.Repeat("0123456789", 100_000)
	writeFile(t, filepath.Join(dir, "big"), big)
	c, err := s.CommitTree(ctx, r, dir, []string{first}, "m")
	if err != nil {
		t.Fatal(err)
	}
	es, err := s.List(ctx, r, c, "")
	if err != nil || len(es) != 1 {
		t.Fatalf("list: %v %v", es, err)
	}
	var out bytes.Buffer
	if err := s.WriteBlob(ctx, r, es[0].SHA, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != big {
		t.Fatalf("got %d bytes, want the %d of the file", out.Len(), len(big))
	}
	if err := s.WriteBlob(ctx, r, strings.Repeat("ab", 20), io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing blob: %v, want ErrNotFound", err)
	}
	for _, name := range []string{"-p", "HEAD", c + ":big", "--output=/tmp/x", ""} {
		if err := s.WriteBlob(ctx, r, name, io.Discard); !errors.Is(err, ErrBadArgument) {
			t.Errorf("WriteBlob(%q): %v, want ErrBadArgument", name, err)
		}
	}
}

// TestWriteBlobLetsWritersOnceStreaming: a reader that stalls after the
// first bytes does not hold the repository's lock, so a writer gets it.
func TestWriteBlobLetsWritersOnceStreaming(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(2*time.Second))
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big"), strings.Repeat("x", 8<<20))
	c, err := s.CommitTree(ctx, r, dir, []string{first}, "m")
	if err != nil {
		t.Fatal(err)
	}
	es, _ := s.List(ctx, r, c, "")
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.WriteBlob(ctx, r, es[0].SHA, pw); pw.Close() }()
	head := make([]byte, 10)
	if _, err := io.ReadFull(pr, head); err != nil { // git is streaming, and now blocked on us
		t.Fatal(err)
	}
	release, err := s.Lock(ctx, r.GitDir, true)
	if err != nil {
		t.Fatalf("a writer waited for a stalled download: %v", err)
	}
	release()
	pr.Close()
	if err := <-done; err == nil {
		t.Fatal("a download whose reader left reported success")
	}
}
