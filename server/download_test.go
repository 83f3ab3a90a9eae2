package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atelier/models"
)

// bigSize is the size of the files the memory tests move: far more than
// any buffer a streaming path holds, so holding one whole shows.
const bigSize = 200 << 20

// bigFile is a large file's content as a reader: a head naming it, zeros
// (which compress, so archives of it stay small), and a tail.
func bigFile(name string, size int64) io.Reader {
	head := []byte("head of " + name + "\n")
	tail := []byte("\ntail of " + name + "\n")
	zeros := size - int64(len(head)) - int64(len(tail))
	return io.MultiReader(bytes.NewReader(head), io.LimitReader(zeroReader{}, zeros), bytes.NewReader(tail))
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// sums are a file's sha256 and its git blob id.
func sums(r io.Reader, size int64) (sha256sum, blob string) {
	h, g := sha256.New(), sha1.New()
	fmt.Fprintf(g, "blob %d\x00", size)
	io.Copy(io.MultiWriter(h, g), r)
	return hex.EncodeToString(h.Sum(nil)), hex.EncodeToString(g.Sum(nil))
}

// bigArchive is a .tar.gz of files of size bytes each, built as a stream.
func bigArchive(t *testing.T, size int64, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, bigFile(name, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	gz.Close()
	return buf.Bytes()
}

// heapGrowth runs fn and returns how far the process's heap in use rose
// above where it stood before (sampled every few milliseconds) and how many
// bytes were allocated meanwhile. The server runs in this process, so its
// buffers count; so do the test's own, which are small.
func heapGrowth(fn func()) (peak, allocated uint64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var top atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > before.HeapInuse && m.HeapInuse-before.HeapInuse > top.Load() {
				top.Store(m.HeapInuse - before.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(stop)
	<-sampled
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return top.Load(), after.TotalAlloc - before.TotalAlloc
}

// downloadMany fetches path n times at once as c and checks that each body
// is the whole file.
func downloadMany(t *testing.T, c *client, path string, n int, wantSize int64, wantSum string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.h.srv.URL+path, nil)
			res, err := c.http.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK || res.ContentLength != wantSize ||
				res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Content-Security-Policy") != "sandbox" {
				errs <- fmt.Errorf("download: %s, length %d, type %q", res.Status, res.ContentLength, res.Header.Get("Content-Type"))
				return
			}
			if sum, _ := sums(res.Body, wantSize); sum != wantSum {
				errs <- fmt.Errorf("download: the body is not the file")
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("%v (and %d more)", err, len(errs))
	}
}

// expectStreamed downloads path ten times at once and fails when the
// server's heap grew with the file rather than with the request.
func expectStreamed(t *testing.T, c *client, path string, wantSum string) {
	t.Helper()
	const downloads = 10
	peak, allocated := heapGrowth(func() { downloadMany(t, c, path, downloads, bigSize, wantSum) })
	t.Logf("%s: %d downloads of %d MiB: heap in use rose %d MiB at most, %d MiB allocated",
		path, downloads, bigSize>>20, peak>>20, allocated>>20)
	// Whole-file reads would hold 10 × 200 MiB at once and allocate at
	// least as much; streams hold a few buffers each.
	if peak > 64<<20 || allocated > 128<<20 {
		t.Fatalf("heap rose %d MiB and %d MiB were allocated for %d downloads of %d MiB: the file is held in memory",
			peak>>20, allocated>>20, downloads, bigSize>>20)
	}
}

// TestRawDownloadsStreamContainer: a large file of a Container project is
// served from the object store and, when the store lacks it, from git,
// either way in memory that does not grow with the file.
func TestRawDownloadsStreamContainer(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	reader := h.user("reader", false)
	id := owner.createProject("big")
	owner.addMember(id, "reader", "member")
	if res := owner.upload(id, "big.tar.gz", bigArchive(t, bigSize, "big.bin", "small.txt"), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	wantSum, blob := sums(bigFile("big.bin", bigSize), bigSize)
	path := "/projects/" + itoa(id) + "/code/raw?download=1&path=" + url.QueryEscape("big.bin")

	stored := filepath.Join(h.cfg.ObjectsDir(), "blobs", blob[:2], blob)
	if fi, err := os.Stat(stored); err != nil || fi.Size() != bigSize {
		t.Fatalf("the file was not published to the object store: %v", err)
	}
	t.Run("object store", func(t *testing.T) { expectStreamed(t, reader, path, wantSum) })

	// Without the object, the server reads through git.
	if err := os.Remove(stored); err != nil {
		t.Fatal(err)
	}
	t.Run("git", func(t *testing.T) { expectStreamed(t, reader, path, wantSum) })
}

// TestRawDownloadsStreamLocal: a large file of a Local project is served
// from the folder, in memory that does not grow with the file, and a range
// request gets only its range.
func TestRawDownloadsStreamLocal(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	owner := h.user("owner", false)
	folder := filepath.Join(t.TempDir(), "work")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(folder, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, bigFile("big.bin", bigSize)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := owner.post("/projects", url.Values{"name": {"local"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	path := "/projects/" + itoa(id) + "/code/raw?path=big.bin"
	wantSum, _ := sums(bigFile("big.bin", bigSize), bigSize)
	expectStreamed(t, owner, path, wantSum)

	ranged := owner.get(path, header{"Range": "bytes=0-11"})
	if got := readBody(ranged); ranged.StatusCode != http.StatusPartialContent || got != "head of big." {
		t.Fatalf("range: %d %q", ranged.StatusCode, got)
	}
}

// TestImportOfLargeFilesStreams: importing an archive of several files of
// more than 100 MiB, and publishing them to the object store, holds none
// of them in memory.
func TestImportOfLargeFilesStreams(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("large")
	const size = 150 << 20
	names := []string{"a.bin", "b.bin", "c.bin"}
	archive := bigArchive(t, size, names...)
	peak, allocated := heapGrowth(func() {
		if res := owner.upload(id, "large.tar.gz", archive, jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
		}
	})
	t.Logf("import and publish of %d files of %d MiB: heap in use rose %d MiB at most, %d MiB allocated",
		len(names), size>>20, peak>>20, allocated>>20)
	if peak > 96<<20 || allocated > 192<<20 {
		t.Fatalf("heap rose %d MiB and %d MiB were allocated for %d files of %d MiB: files are held in memory",
			peak>>20, allocated>>20, len(names), size>>20)
	}
	for _, name := range names {
		_, blob := sums(bigFile(name, size), size)
		if fi, err := os.Stat(filepath.Join(h.cfg.ObjectsDir(), "blobs", blob[:2], blob)); err != nil || fi.Size() != size {
			t.Fatalf("%s was not published whole: %v", name, err)
		}
	}
}
