package editsession

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"atelier/gitsvc"
)

// TestWalkLeavesOutWithReasons: what cannot be an edit comes back as data
// (path, why, whether anything below was read), the notes people read are
// rendered from it, and a base file below an unread folder is not taken
// for deleted.
func TestWalkLeavesOutWithReasons(t *testing.T) {
	dir := t.TempDir()
	write := func(p, content string) {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ok.txt", "fine\n")
	write("bad\xff/inside.txt", "unreadable folder name\n")
	write("big.bin", strings.Repeat("x", MaxFileBytes+1))
	write("nul.dat", "a\x00b")
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, _, left, err := walkCheckout(dir, map[string]gitsvc.Entry{}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := files["ok.txt"]; !ok || f.kind != textFile || string(f.content) != "fine\n" {
		t.Errorf("ok.txt = %+v", f)
	}
	var notes []string
	for _, l := range left {
		notes = append(notes, l.Note())
	}
	slices.Sort(notes)
	want := []string{
		"bad\xff: left out, not a valid path",
		"big.bin: left out, larger than 256 KiB",
		"nul.dat: left out, a binary file",
		"pipe: left out, not a regular file",
	}
	if !slices.Equal(notes, want) {
		t.Errorf("notes:\n%q\nwant\n%q", notes, want)
	}
	if !underUnwalked("bad\xff/inside.txt", left) {
		t.Error("a base file below an unread folder counts as deleted")
	}
	for _, p := range []string{"ok.txt", "big.bin", "nul.dat/x", "bad\xffx/y"} {
		if underUnwalked(p, left) {
			t.Errorf("%q is taken to be below an unread folder", p)
		}
	}
}

// TestWalkSkipsOnlyWhatTheKernelSaysIsUnchanged: a file whose inode and
// times are those of the last walk is not read again; one rewritten with
// the same size and its mtime put back is (ctime moved); one changed too
// close to the walk's start is not trusted for the next.
func TestWalkSkipsOnlyWhatTheKernelSaysIsUnchanged(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"kept.txt", "forged.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("aaaa"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As if the first walk began well after the files were written.
	_, seen, _, err := walkCheckout(dir, nil, nil, time.Now().Add(2*racyMargin))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("the first walk trusts %d files, want 2", len(seen))
	}
	forged := filepath.Join(dir, "forged.txt")
	fi, err := os.Stat(forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forged, []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(forged, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	files, next, _, err := walkCheckout(dir, nil, seen, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if f := files["kept.txt"]; !f.unread || f.blob != gitBlobID([]byte("aaaa")) {
		t.Errorf("kept.txt = %+v, want skipped with the blob seen before", f)
	}
	if f := files["forged.txt"]; f.unread || string(f.content) != "bbbb" || f.blob != gitBlobID([]byte("bbbb")) {
		t.Errorf("forged.txt = %+v, want read again: bbbb", f)
	}
	if _, ok := next["forged.txt"]; ok {
		t.Error("a file changed just before the walk began is trusted by the next")
	}
	if _, ok := next["kept.txt"]; !ok {
		t.Error("an unchanged file is forgotten by the next walk")
	}
}
