package codestore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atelier/storage/codestore"
)

// TestOpenStreamsAndEndsCleanly: a file opened through git streams whole,
// a reader closed early ends its git process and goroutine, the read
// stops at its limit, and folders and missing paths answer as reads do.
func TestOpenStreamsAndEndsCleanly(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, through a pipe of 64 KiB
	commit := fastImport(t, e.repo, e.first, []file{{"big.txt", big}, {"dir/a.txt", "a\n"}}, true)
	src := codestore.Source{Repo: e.repo, Commit: commit}
	s := e.store(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	rc, size, err := s.Open(ctx, src, "big.txt")
	if err != nil || size != int64(len(big)) {
		t.Fatalf("open: %d %v", size, err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != big {
		t.Fatalf("read %d bytes, %v; want the %d of the file", len(got), err, len(big))
	}

	rc, _, err = s.Open(ctx, src, "big.txt")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 16)
	if _, err := io.ReadFull(rc, head); err != nil || string(head) != big[:16] {
		t.Fatalf("head %q %v", head, err)
	}
	closed := make(chan struct{})
	go func() { rc.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("closing a half-read file waits for git to finish writing it")
	}

	data, size, err := s.Read(ctx, src, "big.txt", 100)
	if err != nil || len(data) != 100 || size != int64(len(big)) {
		t.Fatalf("limited read: %d bytes of %d, %v", len(data), size, err)
	}
	if _, _, err := s.Open(ctx, src, "dir"); !errors.Is(err, codestore.ErrIsDir) {
		t.Fatalf("open of a folder: %v, want ErrIsDir", err)
	}
	if _, _, err := s.Open(ctx, src, "dir/missing"); !errors.Is(err, codestore.ErrNotFound) {
		t.Fatalf("open of a missing file: %v, want ErrNotFound", err)
	}
}
