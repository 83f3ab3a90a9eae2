package storage

import (
	"context"
	"fmt"
	"io"
)

// exactReader passes on the bytes of r, which must be exactly size, and
// fails with ErrSizeMismatch when r ends early or goes on. It holds back the
// bytes that complete the object until it has seen r end: a consumer that
// stops after size bytes by itself (an HTTP request with a Content-Length)
// therefore never sends a whole object from a reader that was too long. It
// also stops at the first read after ctx is done.
type exactReader struct {
	ctx  context.Context
	r    io.Reader
	size int64
	n    int64 // bytes passed on so far
	err  error // the first error returned, returned again from then on
	done bool  // r ended right after size bytes, all of which were passed on
}

func newExactReader(ctx context.Context, r io.Reader, size int64) *exactReader {
	return &exactReader{ctx: ctx, r: r, size: size}
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.done {
		return 0, io.EOF
	}
	if e.err != nil {
		return 0, e.err
	}
	if err := e.ctx.Err(); err != nil {
		return 0, e.fail(err)
	}
	left := e.size - e.n
	if left == 0 { // size 0, or the previous read stopped right at size
		if err := e.atEnd(nil); err != nil {
			return 0, e.fail(err)
		}
		e.done = true
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := e.r.Read(p)
	if int64(n) == left {
		// These bytes complete the object: pass them on only once r is
		// known to end here.
		if err := e.atEnd(err); err != nil {
			return 0, e.fail(err)
		}
		e.n += int64(n)
		e.done = true
		return n, nil
	}
	e.n += int64(n)
	switch {
	case err == io.EOF:
		return n, e.fail(fmt.Errorf("%w: the reader ended after %d of %d bytes", ErrSizeMismatch, e.n, e.size))
	case err != nil:
		return n, e.fail(err)
	}
	return n, nil
}

// atEnd tells whether r is exhausted after exactly size bytes: it returns
// nil when it is, ErrSizeMismatch when r has another byte, or the error of
// reading it. readErr is what the read that reached size returned.
func (e *exactReader) atEnd(readErr error) error {
	if readErr == io.EOF {
		return nil
	}
	if readErr != nil {
		return readErr
	}
	var one [1]byte
	// A reader may return 0, nil now and then; one that keeps doing so is
	// broken (io.ErrNoProgress).
	for range 100 {
		n, err := e.r.Read(one[:])
		if n > 0 {
			return fmt.Errorf("%w: the reader has more than %d bytes", ErrSizeMismatch, e.size)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

func (e *exactReader) fail(err error) error {
	e.err = err
	return err
}
