//go:build linux

package sandbox

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// archiveOf is a tar stream of n files of size bytes each, in folders of
// 100, each folder's entry before its files, as git archive writes them.
// at(i) may replace file i's name.
func archiveOf(t *testing.T, n, size int, at func(i int) string) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		body := bytes.Repeat([]byte("x"), size)
		for i := range n {
			if i%100 == 0 {
				tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%03d/", i/100), Typeflag: tar.TypeDir, Mode: 0o755})
			}
			name := fmt.Sprintf("d%03d/f%03d", i/100, i%100)
			if at != nil {
				name = at(i)
			}
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)}); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := tw.Write(body); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}

// Files wait for unpack's writers in memory, but never more than its
// queue: an archive of 96 MiB in files just small enough to be queued
// grows the heap by a fraction of that, and every file is written whole.
func TestUnpackHoldsLittleOfTheArchive(t *testing.T) {
	const n, size = 384, unpackInMemory
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak.Store(max(peak.Load(), m.HeapAlloc))
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	err = unpack(tar.NewReader(archiveOf(t, n, size, nil)), root)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("unpacking %d MiB grew the heap by %d MiB at most", n*size>>20, grew>>20)
	// The queue and the writers' files, 17 MiB, and garbage not yet
	// collected: well below the archive's 96.
	if grew > 48<<20 {
		t.Fatalf("unpacking %d MiB grew the heap by %d MiB", n*size>>20, grew>>20)
	}
	for i := range n {
		fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("d%03d/f%03d", i/100, i%100)))
		if err != nil || fi.Size() != size {
			t.Fatalf("file %d: %v", i, err)
		}
	}
}

// A file a writer cannot make fails the unpacking, which stops reading the
// archive and returns; no writer is left behind (TestMain checks).
func TestUnpackStopsAtAWritersFailure(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// File 50 names a folder that is a file: its writer's create fails,
	// with thousands of files after it.
	archive := archiveOf(t, 5000, 10, func(i int) string {
		if i == 50 {
			return "d000/f001/inside"
		}
		return fmt.Sprintf("d%03d/f%03d", i/100, i%100)
	})
	err = unpack(tar.NewReader(archive), root)
	if err == nil || !strings.Contains(err.Error(), "d000/f001/inside") {
		t.Fatalf("unpack with a file it cannot make: %v", err)
	}
	io.Copy(io.Discard, archive) // the writer of the archive ends
}
