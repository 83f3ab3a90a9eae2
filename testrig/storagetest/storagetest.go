// Package storagetest holds the conformance tests that every
// storage.ObjectStore passes: a backend's own test calls Run with a function
// that makes an empty store.
//
//	func TestLocal(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.ObjectStore { ... })
//	}
package storagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"atelier/storage"
)

// Run runs the conformance tests, each as a subtest on a store of its own
// from newStore, which must be empty.
func Run(t *testing.T, newStore func(t *testing.T) storage.ObjectStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.ObjectStore)
	}{
		{"RoundTrip", testRoundTrip},
		{"ValidKeys", testValidKeys},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"SizeMismatch", testSizeMismatch},
		{"FailingReader", testFailingReader},
		{"BadKeys", testBadKeys},
		{"ConcurrentPuts", testConcurrentPuts},
		{"CancelledContext", testCancelledContext},
		{"CancelDuringPut", testCancelDuringPut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStore(t))
		})
	}
}

// blobKey is the key Atelier would give data: its kind and its hash.
func blobKey(data []byte) string {
	sum := sha256.Sum256(data)
	return "blobs/" + hex.EncodeToString(sum[:])
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t *testing.T, s storage.ObjectStore, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
}

// wantObject checks that key holds exactly data, through Stat and Get.
func wantObject(t *testing.T, s storage.ObjectStore, key string, data []byte) {
	t.Helper()
	ctx := context.Background()
	size, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	if size != int64(len(data)) {
		t.Errorf("Stat(%q) = %d, want %d", key, size, len(data))
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	got, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("Get(%q) gave %d bytes (sha256 %x), want %d (sha256 %x)",
			key, len(got), sha256.Sum256(got), len(data), sha256.Sum256(data))
	}
}

// wantMissing checks that Get and Stat report key as missing, and as
// nothing else.
func wantMissing(t *testing.T, s storage.ObjectStore, key string) {
	t.Helper()
	ctx := context.Background()
	rc, err := s.Get(ctx, key)
	if err == nil {
		rc.Close()
		t.Errorf("Get(%q) succeeded, want fs.ErrNotExist", key)
	} else if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Get(%q) = %v, want fs.ErrNotExist", key, err)
	}
	size, err := s.Stat(ctx, key)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Stat(%q) = %d, %v, want fs.ErrNotExist", key, size, err)
	}
}

func testRoundTrip(t *testing.T, s storage.ObjectStore) {
	for _, n := range []int{0, 1, 5 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := randomBytes(t, n)
			key := blobKey(data)
			wantMissing(t, s, key)
			put(t, s, key, data)
			wantObject(t, s, key, data)
		})
	}
}

func testValidKeys(t *testing.T, s storage.ObjectStore) {
	long := strings.Repeat("k", 255) + "/" + strings.Repeat("l", 254) + "/z" // 512 bytes
	for _, key := range []string{
		"x",
		"trees/ab",
		"a..b/.hidden/c.d_e-F9",
		"-/_/...",
		long,
	} {
		data := []byte("object " + key)
		put(t, s, key, data)
		wantObject(t, s, key, data)
		if err := s.Delete(context.Background(), key); err != nil {
			t.Errorf("Delete(%q): %v", key, err)
		}
		wantMissing(t, s, key)
	}
}

func testOverwrite(t *testing.T, s storage.ObjectStore) {
	data := []byte("the same content twice")
	key := blobKey(data)
	put(t, s, key, data)
	put(t, s, key, data)
	wantObject(t, s, key, data)

	// Put replaces; Atelier never needs it, but a store must not mix the two.
	other := []byte("other, longer content under the same key")
	put(t, s, key, other)
	wantObject(t, s, key, other)
}

func testMissing(t *testing.T, s storage.ObjectStore) {
	wantMissing(t, s, "blobs/0000000000000000000000000000000000000000000000000000000000000000")
	wantMissing(t, s, "never/put/anywhere")
	// A key below an object: on a file system the object is a file where
	// a folder would have to be.
	put(t, s, "trees/abc", []byte("a tree"))
	wantMissing(t, s, "trees/abc/def")
	wantMissing(t, s, "trees")
	// Keys whose files, fanned out by Local, are folders and files on the
	// way to other keys' files: "nest/ab" is nest/ab/ab, "nest/ab/abc" is
	// nest/ab/ab/abc.
	put(t, s, "nest/ab/abc", []byte("deep"))
	wantMissing(t, s, "nest/ab")
	if err := s.Delete(context.Background(), "nest/ab"); err != nil {
		t.Errorf("Delete of a missing key whose file would be a folder: %v", err)
	}
	wantObject(t, s, "nest/ab/abc", []byte("deep"))
	put(t, s, "file/ab", []byte("a file"))
	wantMissing(t, s, "file/ab/ab/x")
}

func testDelete(t *testing.T, s storage.ObjectStore) {
	ctx := context.Background()
	if err := s.Delete(ctx, "blobs/never-stored"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	data := []byte("to be deleted")
	key := blobKey(data)
	keep := []byte("to be kept")
	put(t, s, key, data)
	put(t, s, blobKey(keep), keep)
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	wantMissing(t, s, key)
	wantObject(t, s, blobKey(keep), keep)
	if err := s.Delete(ctx, key); err != nil {
		t.Errorf("second Delete(%q): %v, want nil", key, err)
	}
}

func testSizeMismatch(t *testing.T, s storage.ObjectStore) {
	ctx := context.Background()
	big := randomBytes(t, 3<<20)
	tests := []struct {
		name string
		data []byte
		size int64
	}{
		{"Short", []byte("ten bytes."), 11},
		{"Long", []byte("ten bytes."), 9},
		{"LongByOne", []byte("x"), 0},
		{"ShortEmpty", nil, 1},
		{"ShortBig", big, int64(len(big)) + 1},
		{"LongBig", big, int64(len(big)) - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("mismatch/%s-%s", tt.name, blobKey(tt.data)[len("blobs/"):])
			readers := []io.Reader{bytes.NewReader(tt.data)}
			if len(tt.data) <= 1<<10 {
				// The end of the data comes in a read of its own,
				// which a careless count misses.
				readers = append(readers, iotest.OneByteReader(bytes.NewReader(tt.data)))
			}
			for _, r := range readers {
				err := s.Put(ctx, key, r, tt.size)
				if !errors.Is(err, storage.ErrSizeMismatch) {
					t.Errorf("Put of %d bytes as %d = %v, want storage.ErrSizeMismatch", len(tt.data), tt.size, err)
				}
				wantMissing(t, s, key)
			}
		})
	}

	// A failed Put over an existing object leaves that object as it was.
	old := []byte("the object that was there")
	key := blobKey(old)
	put(t, s, key, old)
	for _, size := range []int64{int64(len(old)) - 1, int64(len(old)) + 1} {
		if err := s.Put(ctx, key, bytes.NewReader(old), size); !errors.Is(err, storage.ErrSizeMismatch) {
			t.Errorf("Put of %d bytes as %d over an object = %v, want storage.ErrSizeMismatch", len(old), size, err)
		}
		wantObject(t, s, key, old)
	}
}

func testFailingReader(t *testing.T, s storage.ObjectStore) {
	boom := errors.New("the reader broke")
	data := randomBytes(t, 256<<10)
	r := io.MultiReader(bytes.NewReader(data[:100<<10]), iotest.ErrReader(boom))
	key := blobKey(data)
	err := s.Put(context.Background(), key, r, int64(len(data)))
	if !errors.Is(err, boom) {
		t.Errorf("Put from a reader that fails = %v, want its error", err)
	}
	wantMissing(t, s, key)
}

func testBadKeys(t *testing.T, s storage.ObjectStore) {
	ctx := context.Background()
	bad := []string{
		"",
		"../x",
		"a/../../x",
		"..",
		".",
		"/abs",
		"a//b",
		"a/./b",
		"trailing/",
		"a\x00b",
		"a b",
		"a\\b",
		"ü",
		"a:b",
		"put~1",                          // the temporary files of Local
		strings.Repeat("abcdefghi/", 60), // 600 bytes
		strings.Repeat("k", 255) + "/" + strings.Repeat("l", 255) + "/z", // 513 bytes
		strings.Repeat("s", 256), // one segment longer than a file name may be
	}
	for _, key := range bad {
		shown := key
		if len(shown) > 40 {
			shown = fmt.Sprintf("%.40s... (%d bytes)", key, len(key))
		}
		if err := storage.CheckKey(key); !errors.Is(err, storage.ErrBadKey) {
			t.Errorf("CheckKey(%q) = %v, want storage.ErrBadKey", shown, err)
		}
		if err := s.Put(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, storage.ErrBadKey) {
			t.Errorf("Put(%q) = %v, want storage.ErrBadKey", shown, err)
		}
		if rc, err := s.Get(ctx, key); !errors.Is(err, storage.ErrBadKey) {
			if err == nil {
				rc.Close()
			}
			t.Errorf("Get(%q) = %v, want storage.ErrBadKey", shown, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, storage.ErrBadKey) {
			t.Errorf("Stat(%q) = %v, want storage.ErrBadKey", shown, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, storage.ErrBadKey) {
			t.Errorf("Delete(%q) = %v, want storage.ErrBadKey", shown, err)
		}
	}
}

func testConcurrentPuts(t *testing.T, s storage.ObjectStore) {
	const n = 20
	objects := make([][]byte, n)
	for i := range objects {
		objects[i] = randomBytes(t, 64<<10+i)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, data := range objects {
		wg.Go(func() {
			errs[i] = s.Put(context.Background(), blobKey(data), bytes.NewReader(data), int64(len(data)))
		})
	}
	wg.Wait()
	for i, data := range objects {
		if errs[i] != nil {
			t.Errorf("Put %d: %v", i, errs[i])
			continue
		}
		wantObject(t, s, blobKey(data), data)
	}
}

func testCancelledContext(t *testing.T, s storage.ObjectStore) {
	data := []byte("stored before the context was cancelled")
	key := blobKey(data)
	put(t, s, key, data)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	newKey := "blobs/put-with-a-cancelled-context"
	if err := s.Put(ctx, newKey, bytes.NewReader(data), int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Errorf("Put = %v, want context.Canceled", err)
	}
	if rc, err := s.Get(ctx, key); !errors.Is(err, context.Canceled) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Get = %v, want context.Canceled", err)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Stat = %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete = %v, want context.Canceled", err)
	}
	wantObject(t, s, key, data)
	wantMissing(t, s, newKey)
}

// cancellingReader cancels its context once it has passed on after bytes.
type cancellingReader struct {
	r      io.Reader
	after  int
	cancel context.CancelFunc
	n      int
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	if c.n >= c.after {
		c.cancel()
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func testCancelDuringPut(t *testing.T, s storage.ObjectStore) {
	data := randomBytes(t, 1<<20)
	key := blobKey(data)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &cancellingReader{r: iotest.HalfReader(bytes.NewReader(data)), after: 200 << 10, cancel: cancel}
	if err := s.Put(ctx, key, r, int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Errorf("Put cancelled half way = %v, want context.Canceled", err)
	}
	wantMissing(t, s, key)
}
