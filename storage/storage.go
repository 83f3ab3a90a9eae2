// Package storage keeps Atelier's immutable, content-addressed objects (the
// trees and blobs of projects) behind one interface, with two backends: a
// folder on the local disk (Local, the default) and an S3-compatible server
// such as MinIO (S3).
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ObjectStore keeps immutable, content-addressed objects under keys such as
// "trees/<sha>" and "blobs/<sha>". Every key is checked with CheckKey first;
// a bad one fails with ErrBadKey and never reaches the backend.
// Implementations are safe for concurrent use.
type ObjectStore interface {
	// Get opens the object. A missing key fails with an error that
	// errors.Is(err, fs.ErrNotExist) recognises. The caller closes the
	// reader.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Put stores exactly size bytes read from r under key, replacing what
	// was there. When r yields fewer or more bytes than size, Put fails
	// with ErrSizeMismatch; a failed Put leaves no new object behind.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Stat returns the object's size, or an fs.ErrNotExist error.
	Stat(ctx context.Context, key string) (size int64, err error)
	// Delete removes the object; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// Batcher is an ObjectStore whose writes can be made durable together.
// PutBatched stores like Put, and the object reads back like any, but it
// may not survive a crash of the machine until the next Sync has returned:
// a caller records that an object is stored only after that. Syncing each
// object's file and folder on its own costs two disk flushes per object;
// a publish of thousands of small files spends most of its time there. A
// store whose every Put is durable when it returns (S3) has no need of it.
type Batcher interface {
	PutBatched(ctx context.Context, key string, r io.Reader, size int64) error
	Sync(ctx context.Context) error
}

var (
	_ ObjectStore = (*Local)(nil)
	_ ObjectStore = (*S3)(nil)
	_ Batcher     = (*Local)(nil)
)

var (
	// ErrBadKey reports a key that CheckKey refuses.
	ErrBadKey = errors.New("storage: bad key")
	// ErrSizeMismatch reports a Put whose reader did not yield the size it
	// was given.
	ErrSizeMismatch = errors.New("storage: object size does not match the data")
	// ErrUnavailable reports that the object store could not be reached or
	// failed on its side (a refused or broken connection, a timeout, a 5xx
	// answer). It lets a caller tell "the object is missing" (fs.ErrNotExist)
	// from "the store is down"; the error that caused it is wrapped too.
	ErrUnavailable = errors.New("storage: object store unavailable")
)

// MaxKeyLen is the longest key, in bytes.
const MaxKeyLen = 512

// maxSegmentLen is the longest segment of a key: the usual limit of a file
// name, so that every valid key can be stored by Local as well as by S3.
const maxSegmentLen = 255

// CheckKey returns nil for a valid key, else an error wrapping ErrBadKey. A
// valid key is at most MaxKeyLen bytes long and made of one or more segments
// separated by single slashes; each segment has 1 to 255 of the characters
// A-Z a-z 0-9 . _ - and is neither "." nor "..". So a key has no leading or
// trailing slash and can never name a path outside the store.
func CheckKey(key string) error {
	if key == "" {
		return badKey(key, "empty")
	}
	if len(key) > MaxKeyLen {
		return badKey(key, fmt.Sprintf("%d bytes, more than %d", len(key), MaxKeyLen))
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return badKey(key, "empty segment (leading, trailing or double slash)")
		case seg == "." || seg == "..":
			return badKey(key, fmt.Sprintf("%q segment", seg))
		case len(seg) > maxSegmentLen:
			return badKey(key, fmt.Sprintf("segment of %d bytes, more than %d", len(seg), maxSegmentLen))
		}
		for i := 0; i < len(seg); i++ {
			if !keyByte(seg[i]) {
				return badKey(key, fmt.Sprintf("byte %q not allowed", seg[i]))
			}
		}
	}
	return nil
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

func badKey(key, why string) error {
	const show = 64 // a long key would drown the message
	if len(key) > show {
		key = key[:show] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrBadKey, key, why)
}

// checkPut checks the size and context of a Put before it reads anything.
func checkPut(ctx context.Context, size int64) error {
	if size < 0 {
		return fmt.Errorf("%w: negative size %d", ErrSizeMismatch, size)
	}
	return ctx.Err()
}
