package codestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"atelier/gitsvc"
)

// Open returns the file at path for streaming, with its size: the object
// store's reader when the commit is published and the store answers, else
// git's output through a pipe. Either way the file is never held in memory
// whole, so a download costs the same whatever the file's size. A reader
// that can also Seek (a local object store's file) lets the caller serve
// ranges. The caller closes it.
func (s *Store) Open(ctx context.Context, src Source, path string) (io.ReadCloser, int64, error) {
	if root, ok := s.publishedRoot(ctx, src.Commit); ok {
		rc, size, err := s.openPublished(ctx, root, path)
		if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrIsDir) {
			return rc, size, err
		}
		s.log.Warn("codestore: object store read failed; reading through git", "commit", src.Commit, "path", path, "err", err)
	}
	e, err := s.gitEntry(ctx, src, path)
	if err != nil {
		return nil, 0, err
	}
	return s.streamBlob(ctx, src.Repo, e.SHA), e.Size, nil
}

func (s *Store) openPublished(ctx context.Context, root, path string) (io.ReadCloser, int64, error) {
	e, err := s.publishedEntry(ctx, root, path)
	if err != nil {
		return nil, 0, err
	}
	// The download may take long, so the request's own context governs the
	// body; only reaching the store is bounded by objectTimeout, as every
	// read path is.
	bctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(objectTimeout, cancel)
	rc, err := s.objects.Get(bctx, blobKey(e.SHA))
	if !timer.Stop() && err == nil {
		rc.Close()
		err = fmt.Errorf("codestore: blob %s: store did not answer within %v: %w", e.SHA, objectTimeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		return nil, 0, err
	}
	c := &cancelOnClose{ReadCloser: rc, cancel: cancel}
	if sk, ok := rc.(io.Seeker); ok {
		return seekableCancelOnClose{c, sk}, e.Size, nil
	}
	return c, e.Size, nil
}

// publishedEntry finds path in the published tree root; a folder is
// ErrIsDir.
func (s *Store) publishedEntry(ctx context.Context, root, path string) (Entry, error) {
	dir, name := splitPath(path)
	es, err := s.walk(ctx, root, dir)
	return fileEntry(es, err, name)
}

// gitEntry finds path in the commit through git.
func (s *Store) gitEntry(ctx context.Context, src Source, path string) (Entry, error) {
	dir, name := splitPath(path)
	es, err := s.gitList(ctx, src, dir)
	return fileEntry(es, err, name)
}

// fileEntry picks the file name out of a folder's listing (or passes on
// the listing's error); a folder or a submodule is ErrIsDir.
func fileEntry(es []Entry, err error, name string) (Entry, error) {
	if err != nil {
		return Entry{}, err
	}
	e, ok := find(es, name)
	if !ok {
		return Entry{}, ErrNotFound
	}
	if e.Kind == KindDir || e.Kind == KindSubmodule {
		return Entry{}, ErrIsDir
	}
	return e, nil
}

// streamBlob runs git for the blob sha and hands out its output as a
// reader. Closing the reader early ends git: its next write fails, and the
// context is cancelled too. Close waits for git, so nothing outlives it.
func (s *Store) streamBlob(ctx context.Context, r *gitsvc.Repo, sha string) io.ReadCloser {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.git.WriteBlob(ctx, r, sha, pw)
		if errors.Is(err, gitsvc.ErrNotFound) {
			err = fmt.Errorf("codestore: blob %s: %w", sha, ErrNotFound)
		}
		pw.CloseWithError(err) // nil: the reader sees io.EOF
	}()
	return &gitBlob{PipeReader: pr, cancel: cancel, done: done}
}

type gitBlob struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *gitBlob) Close() error {
	b.PipeReader.Close()
	b.cancel()
	<-b.done
	return nil
}

// cancelOnClose ends the object store request's context with the reader.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// seekableCancelOnClose keeps a seekable reader seekable.
type seekableCancelOnClose struct {
	*cancelOnClose
	io.Seeker
}
