package server

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/rand"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"atelier/projects"
	"atelier/testrig/archivebomb"
)

// Imports are bounded by what their archives unpack to, counted while the
// archive streams: a small upload that unpacks to gigabytes, or that holds
// more than 100,000 entries, is refused at once with 400 archive_too_large,
// and nothing is stored.

// bomb takes an archive from archivebomb, failing t when it could not be
// built: bomb(t)(archivebomb.ZipOfZeros(8)).
func bomb(t *testing.T) func([]byte, error) []byte {
	return func(archive []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return archive
	}
}

// archiveFile writes an archive to a file of the test's own, so the
// upload streams from the disk and the test's heap stays out of the
// server's measure.
func archiveFile(t *testing.T, name string, write func(io.Writer) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := write(f); err != nil {
		t.Fatal(err)
	}
	return path
}

// uploadFile posts the archive in the file at path as the page's script
// does, streamed from the disk.
func (c *client) uploadFile(id int64, path string) *http.Response {
	c.h.t.Helper()
	f, err := os.Open(path)
	if err != nil {
		c.h.t.Fatal(err)
	}
	defer f.Close()
	var head, tail bytes.Buffer
	mw := multipart.NewWriter(&head)
	mw.CreateFormFile("archive", filepath.Base(path))
	tail.WriteString("\r\n--" + mw.Boundary() + "--\r\n")
	return c.do(http.MethodPost, "/projects/"+itoa(id)+"/import", io.MultiReader(&head, f, &tail),
		header{"Content-Type": mw.FormDataContentType(), "X-CSRF-Token": c.csrf, "Accept": "application/json"})
}

// stored lists every file below the project's repository and the object
// store, with its size: what an import would leave behind.
func stored(t *testing.T, h *harness, id int64) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{filepath.Join(h.cfg.GitDir(), projects.CanonicalName(id)+".git", "objects"), h.cfg.ObjectsDir()} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, p+" "+strconv.FormatInt(info.Size(), 10))
			return nil
		})
	}
	slices.Sort(out)
	return out
}

// A 2 MB zip (and .tar.gz) of 2 GiB of zeros is refused with 400
// archive_too_large saying which bound it passed, past the default 1 GiB
// of ATELIER_IMPORT_MAX_EXPANDED_BYTES; no object is stored in the
// repository or the object store, and canonical does not move.
func TestImportRefusesArchiveBombs(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("bombs")
	canonical := *owner.project(id).CanonicalCommit
	before := stored(t, h, id)
	for name, archive := range map[string][]byte{
		"zeros.zip":    bomb(t)(archivebomb.ZipOfZeros(2048)),
		"zeros.tar.gz": bomb(t)(archivebomb.TarGzOfZeros(2048)),
	} {
		if len(archive) > 3<<20 {
			t.Fatalf("%s is %d bytes, not a bomb", name, len(archive))
		}
		p := expectProblem(t, owner.upload(id, name, archive, jsonAccept), http.StatusBadRequest, "archive_too_large")
		if !strings.Contains(p.Error, "unpacks to more than 1 GiB") {
			t.Errorf("%s: the refusal does not name the bound: %q", name, p.Error)
		}
	}
	if after := *owner.project(id).CanonicalCommit; after != canonical {
		t.Error("a refused import moved canonical")
	}
	if after := stored(t, h, id); !slices.Equal(after, before) {
		t.Errorf("refused imports stored objects:\n%s\nbefore:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
}

// ATELIER_IMPORT_MAX_EXPANDED_BYTES sets the bound: an archive that
// unpacks to less imports, one that unpacks to more is refused naming the
// setting's value.
func TestImportMaxExpandedBytesIsTheOperators(t *testing.T) {
	cfg, err := LoadConfig(func(k string) string {
		return map[string]string{"ATELIER_DATA": t.TempDir(), "ATELIER_IMPORT_MAX_EXPANDED_BYTES": strconv.Itoa(16 << 20)}[k]
	})
	if err != nil || cfg.MaxExpandedBytes != 16<<20 {
		t.Fatalf("LoadConfig: %d, %v", cfg.MaxExpandedBytes, err)
	}
	if _, err := LoadConfig(func(k string) string {
		return map[string]string{"ATELIER_DATA": t.TempDir(), "ATELIER_IMPORT_MAX_EXPANDED_BYTES": "lots"}[k]
	}); err == nil {
		t.Fatal("LoadConfig took a bound that is no number")
	}

	h := newHarness(t, func(c *Config) { c.MaxExpandedBytes = 16 << 20 })
	owner := h.user("owner", false)
	id := owner.createProject("bounded")
	if res := owner.upload(id, "small.zip", bomb(t)(archivebomb.ZipOfZeros(8)), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("8 MiB unpacked under a 16 MiB bound: %d %s", res.StatusCode, readBody(res))
	}
	p := expectProblem(t, owner.upload(id, "large.tar.gz", bomb(t)(archivebomb.TarGzOfZeros(32)), jsonAccept), http.StatusBadRequest, "archive_too_large")
	if !strings.Contains(p.Error, "unpacks to more than 16 MiB") {
		t.Errorf("the refusal does not name the bound: %q", p.Error)
	}
}

// An archive of 1.2 million empty entries is refused with 400
// archive_too_large as soon as the count passes 100,000 (a zip's end
// record says it before any entry is read), and the server's heap grows by
// less than 32 MiB on the way: the zip's directory is never loaded whole.
func TestImportRefusesTooManyEntriesInBoundedMemory(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxImportBytes = 128 << 20 })
	owner := h.user("owner", false)
	id := owner.createProject("many")
	canonical := *owner.project(id).CanonicalCommit
	before := stored(t, h, id)
	// Garbage the collector has yet to find counts in the heap sampled;
	// collecting sooner keeps the measure to what the import holds.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	many := []string{
		archiveFile(t, "many.zip", func(w io.Writer) error { return archivebomb.WriteZipOfEmptyFiles(w, 1_200_000) }),
		archiveFile(t, "many.tar.gz", func(w io.Writer) error {
			_, err := w.Write(bomb(t)(archivebomb.TarGzOfEmptyFiles(1200)))
			return err
		}),
	}
	for _, path := range many {
		live := liveHeap()
		peaks := sampleServer(t)
		res := owner.uploadFile(id, path)
		heap, _ := peaks.stop()
		p := expectProblem(t, res, http.StatusBadRequest, "archive_too_large")
		if !strings.Contains(p.Error, "more than 100000 entries") {
			t.Errorf("%s: the refusal does not name the bound: %q", filepath.Base(path), p.Error)
		}
		t.Logf("%s: the heap grew by %d MiB", filepath.Base(path), (heap-live)>>20)
		if grew := heap - live; grew > 32<<20 {
			t.Errorf("%s: the server's heap grew by %d MiB", filepath.Base(path), grew>>20)
		}
	}
	if after := *owner.project(id).CanonicalCommit; after != canonical {
		t.Error("a refused import moved canonical")
	}
	if after := stored(t, h, id); !slices.Equal(after, before) {
		t.Errorf("refused imports stored objects: %v", after)
	}
}

// An archive that breaks only while its contents stream into git (a zip
// entry whose data ends before the size its directory gives) is refused,
// and the objects git had already written for the files before it are
// removed: nothing is stored.
func TestImportRefusedWhileWritingStoresNothing(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("cut")
	canonical := *owner.project(id).CanonicalCommit
	before := stored(t, h, id)

	noise := make([]byte, 4<<20) // incompressible: git's pack grows with it
	rand.Read(noise)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "first.bin", Method: zip.Store})
	w.Write(noise)
	// The second says 8 MiB and holds 2 MiB of zeros.
	var packed bytes.Buffer
	fw, _ := flate.NewWriter(&packed, flate.BestSpeed)
	fw.Write(make([]byte, 2<<20))
	fw.Close()
	stream := packed.Bytes()
	w, _ = zw.CreateRaw(&zip.FileHeader{Name: "second.bin", Method: zip.Deflate, CRC32: 1,
		CompressedSize64: uint64(len(stream)), UncompressedSize64: 8 << 20})
	w.Write(stream)
	zw.Close()

	p := expectProblem(t, owner.upload(id, "cut.zip", buf.Bytes(), jsonAccept), http.StatusBadRequest, "bad_archive")
	if want := `Bad archive: "second.bin" is shorter than its directory entry says.`; p.Error != want {
		t.Errorf("the refusal says %q, want %q", p.Error, want)
	}
	if after := *owner.project(id).CanonicalCommit; after != canonical {
		t.Error("a refused import moved canonical")
	}
	if after := stored(t, h, id); !slices.Equal(after, before) {
		t.Errorf("the refused import left objects:\n%s", strings.Join(after, "\n"))
	}
}
