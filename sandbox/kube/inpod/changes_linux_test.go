//go:build linux

package inpod

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// base unpacks entries into a new root and returns it with the manifest
// the server would keep.
func base(t *testing.T, entries ...tarEntry) (string, []Entry) {
	t.Helper()
	root := t.TempDir()
	f, st := unpackInto(t, root, nil, entries...)
	if st.Error != "" {
		t.Fatalf("unpack: %+v", st)
	}
	return root, f.entries
}

// changes runs the changes verb with the manifest, failing the test if
// it does not end in time (a FIFO opened would block it).
func changes(t *testing.T, root string, manifest []Entry, flags ...string) (*frames, ChangesStatus) {
	t.Helper()
	return changesOf(t, root, [][]Entry{manifest}, flags...)
}

// changesOf runs changes with sections of input, each ended by an empty
// line.
func changesOf(t *testing.T, root string, sections [][]Entry, flags ...string) (*frames, ChangesStatus) {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, section := range sections {
		for _, e := range section {
			if err := enc.Encode(e); err != nil {
				t.Fatal(err)
			}
		}
		in.WriteByte('\n')
	}
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(append([]string{"changes", "-root", root}, flags...), &in, &out, &errb) }()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("changes: exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("changes did not end")
	}
	f := readFrames(t, &out)
	var st ChangesStatus
	f.decodeStatus(t, &st)
	if st.Error != "" {
		t.Fatalf("changes: %+v", st)
	}
	return f, st
}

// byPath indexes entries by path, failing on a path reported twice.
func byPath(t *testing.T, entries []Entry) map[string]Entry {
	t.Helper()
	m := make(map[string]Entry)
	for _, e := range entries {
		if _, ok := m[e.Path]; ok {
			t.Errorf("%s reported twice", e.Path)
		}
		m[e.Path] = e
	}
	return m
}

func TestChangesAfterUnpackReportsNothing(t *testing.T) {
	root, manifest := base(t, file("a", "1"), file("d/b", "2"), dir("empty"), link("l", "a"))
	f, st := changes(t, root, manifest)
	if len(f.entries) != 0 || st.Entries != 0 || st.Overflow {
		t.Errorf("reported %+v, status %+v", f.entries, st)
	}
}

func TestChangesReportsWhatChanged(t *testing.T) {
	root, manifest := base(t, file("same", "s"), file("modified", "old!"), file("deleted", "d"), file("d/relinked", "r"), file("gone/x", "x"))
	// ctime ticks coarsely on some kernels: a same-size rewrite within a
	// tick would look unchanged to any reader of ctime.
	time.Sleep(20 * time.Millisecond)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modified", "new!") // same size, same inode
	write("added", "brand new")
	for _, p := range []string{"deleted", "d/relinked", "gone"} {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../same", filepath.Join(root, "d/relinked")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	f, st := changes(t, root, manifest)
	got := byPath(t, f.entries)
	want := map[string]string{"modified": KindFile, "added": KindFile, "deleted": KindWhiteout, "d/relinked": KindLink, "fifo": KindOther, "gone": KindWhiteout}
	for p, kind := range want {
		if got[p].Kind != kind {
			t.Errorf("%s: reported %+v, want a %s", p, got[p], kind)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s reported, unchanged", p)
		}
	}
	if st.Entries != len(want) {
		t.Errorf("status %+v, want %d entries", st, len(want))
	}
	if string(f.content["modified"]) != "new!" || string(f.content["added"]) != "brand new" {
		t.Errorf("content %q", f.content)
	}
	if !got["modified"].Content || got["fifo"].Content || got["d/relinked"].Target != "../same" {
		t.Errorf("entries %+v", got)
	}
}

func TestChangesBigFileWithoutContent(t *testing.T) {
	root, manifest := base(t)
	big := strings.Repeat("x", 100<<10)
	if err := os.WriteFile(filepath.Join(root, "big"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "small"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := changes(t, root, manifest, "-max-file", "1000")
	got := byPath(t, f.entries)
	if e := got["big"]; e.Kind != KindFile || e.Content || e.Size != int64(len(big)) || f.content["big"] != nil {
		t.Errorf("big: %+v", e)
	}
	if !got["small"].Content || string(f.content["small"]) != "s" {
		t.Errorf("small: %+v", got["small"])
	}

	// Within -max-file but over what -max-bytes has left.
	f, _ = changes(t, root, manifest, "-max-file", "200000", "-max-bytes", "1000")
	if got := byPath(t, f.entries); got["big"].Content || !got["small"].Content {
		t.Errorf("with -max-bytes 1000: %+v", got)
	}

	// Content comes in chunks of at most MaxChunk.
	f, _ = changes(t, root, manifest, "-max-file", "200000")
	if string(f.content["big"]) != big {
		t.Errorf("big's content: %d bytes", len(f.content["big"]))
	}
}

func TestChangesDepthBound(t *testing.T) {
	root, manifest := base(t, file("a/b/c/old", "o"))
	if err := os.WriteFile(filepath.Join(root, "a/b/c/new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := changes(t, root, manifest, "-max-depth", "2")
	// a/b is at depth 2: reported, not entered, and what the manifest
	// holds below it is not taken for deleted.
	if len(f.entries) != 1 || f.entries[0].Path != "a/b" || !f.entries[0].TooDeep {
		t.Errorf("reported %+v, want a/b too deep alone", f.entries)
	}
}

func TestChangesEntriesBound(t *testing.T) {
	root, manifest := base(t)
	for _, n := range []string{"1", "2", "3", "4", "5"} {
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, st := changes(t, root, manifest, "-max-entries", "3")
	if !st.Overflow || st.Entries != 3 || len(f.entries) != 3 {
		t.Errorf("status %+v, %d entries, want overflow after 3", st, len(f.entries))
	}
	// Empty files have content, zero bytes of it.
	if !slices.ContainsFunc(f.entries, func(e Entry) bool { return e.Content }) {
		t.Errorf("entries %+v without content", f.entries)
	}
}

// A FIFO swapped in for a file between the walk's stat and its open is
// opened without waiting for a writer, seen for what it is and not read.
func TestChangesFileSwappedForFIFO(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(root, "f"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	var out bytes.Buffer
	fw := newFrameWriter(&out, false)
	w := &walker{opt: changesOptions{maxDepth: 1, maxEntries: 10, maxFile: 100, maxBytes: 100}, fw: fw, budget: 100}
	done := make(chan error, 1)
	go func() { done <- w.file(dirfd, "f", &Entry{Path: "f", Kind: KindFile, Size: 1}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the FIFO was waited on")
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	f := readFrames(t, &out)
	if len(f.entries) != 1 || f.entries[0].Kind != KindOther || f.entries[0].Content || len(f.content) != 0 {
		t.Errorf("reported %+v, %q", f.entries, f.content)
	}
}

// A server that cannot close the helper's input ends the manifest with
// an empty line.
func TestChangesManifestEndsAtEmptyLine(t *testing.T) {
	root, manifest := base(t, file("a", "1"))
	in, feed := io.Pipe()
	defer in.Close()
	go func() {
		enc := json.NewEncoder(feed)
		for _, e := range manifest {
			enc.Encode(e)
		}
		feed.Write([]byte("\n")) // and the input stays open
	}()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Main([]string{"changes", "-root", root}, in, &out, &errb) }()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		in.Close()
		<-done
		t.Fatal("changes waited for the end of its input")
	}
	f := readFrames(t, &out)
	var st ChangesStatus
	f.decodeStatus(t, &st)
	if len(f.entries) != 0 || st.Error != "" {
		t.Errorf("reported %+v, status %+v", f.entries, st)
	}
}

// With -known, a file whose content the server has (the same inode,
// ctime, size and mode) is named by its line of the known section alone;
// one changed since is sent whole. The walk says when it began on the
// pod's clock.
func TestChangesLeaveOutKnownContent(t *testing.T) {
	root, manifest := base(t)
	for _, name := range []string{"kept", "rewritten"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := changes(t, root, manifest)
	first := byPath(t, f.entries)
	known := []Entry{first["kept"], first["rewritten"]}
	if err := os.WriteFile(filepath.Join(root, "rewritten"), []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixNano()
	f, st := changesOf(t, root, [][]Entry{manifest, known}, "-known")
	got := byPath(t, f.entries)
	if e, ok := got["kept"]; ok || f.content["kept"] != nil || !slices.Equal(f.known, []string{"0"}) {
		t.Errorf("a known file came as %+v, content %q; known lines %q", e, f.content["kept"], f.known)
	}
	if e := got["rewritten"]; !e.Content || string(f.content["rewritten"]) != "again" {
		t.Errorf("a file changed since it was known: %+v %q", e, f.content["rewritten"])
	}
	if st.StartNs < before || st.StartNs > time.Now().UnixNano() {
		t.Errorf("the walk began at %d, not between %d and now", st.StartNs, before)
	}
}
