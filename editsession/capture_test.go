package editsession

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

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
	files, left, err := walkCheckout(dir, map[string]gitsvc.Entry{})
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
