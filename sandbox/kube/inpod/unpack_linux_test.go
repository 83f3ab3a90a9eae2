//go:build linux

package inpod

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tarEntry is one entry of a test's tar stream.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
	remove, keepExec bool
}

func file(name, body string) tarEntry {
	return tarEntry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) tarEntry { return tarEntry{name: name, typ: tar.TypeDir, mode: 0o755} }
func link(name, target string) tarEntry {
	return tarEntry{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func removal(name string) tarEntry { return tarEntry{name: name, typ: tar.TypeReg, remove: true} }

// save is a file as an editor's save writes it: 0644, keeping the
// executable bits of the file it replaces.
func save(name, body string) tarEntry {
	e := file(name, body)
	e.keepExec = true
	return e
}

func tarStream(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link, Format: tar.FormatPAX}
		if e.remove {
			h.PAXRecords = map[string]string{RemoveRecord: "1"}
		}
		if e.keepExec {
			h.PAXRecords = map[string]string{KeepExecRecord: "1"}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// unpackInto runs the unpack verb on root with the tar of entries.
func unpackInto(t *testing.T, root string, flags []string, entries ...tarEntry) (*frames, UnpackStatus) {
	t.Helper()
	var out, errb bytes.Buffer
	args := append([]string{"unpack", "-root", root}, flags...)
	if code := Main(args, tarStream(t, entries...), &out, &errb); code != 0 {
		t.Fatalf("unpack: exit %d: %s", code, errb.String())
	}
	f := readFrames(t, &out)
	var st UnpackStatus
	f.decodeStatus(t, &st)
	return f, st
}

func TestUnpackWritesFilesFoldersLinks(t *testing.T) {
	root := t.TempDir()
	exe := file("bin/run", "#!/bin/sh\n")
	exe.mode = 0o4755 // the setuid bit must not land
	f, st := unpackInto(t, root, nil, dir("./"), dir("src/"), file("src/main.go", "package main\n"), exe, link("src/latest", "main.go"))
	// bin, made to hold bin/run, is reported too.
	if st.Error != "" || st.Entries != 5 || len(f.entries) != 5 {
		t.Fatalf("status %+v, want 5 entries", st)
	}
	if b, err := os.ReadFile(filepath.Join(root, "src/main.go")); err != nil || string(b) != "package main\n" {
		t.Errorf("src/main.go: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "bin/run")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("bin/run: %v, %v, want mode 0755", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(root, "src/latest")); err != nil || target != "main.go" {
		t.Errorf("src/latest: %q, %v", target, err)
	}
	kinds := map[string]string{"src": KindDir, "bin": KindDir, "src/main.go": KindFile, "bin/run": KindFile, "src/latest": KindLink}
	for _, e := range f.entries {
		if kinds[e.Path] != e.Kind {
			t.Errorf("entry %s is a %s, want %q", e.Path, e.Kind, kinds[e.Path])
		}
		var lst syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, e.Path), &lst); err != nil {
			t.Fatal(err)
		}
		// A folder's ctime and size move with each entry written into it
		// later; changes compares folders by kind and mode alone.
		same := e.CtimeNs == lst.Ctim.Nano() && e.Size == lst.Size || e.Kind == KindDir
		if e.Ino != lst.Ino || !same || e.Mode != lst.Mode&0o7777 {
			t.Errorf("entry %+v does not match lstat %+v", e, lst)
		}
	}
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../escape", "/abs", "a/../../escape", "a/../.."} {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			outside := t.TempDir()
			root := filepath.Join(outside, "root")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			_, st := unpackInto(t, root, nil, file(name, "x"))
			if st.Error == "" {
				t.Errorf("status %+v, want an error", st)
			}
			assertOnly(t, outside, "root")
			assertOnly(t, root)
		})
	}
}

func TestUnpackNeverWritesThroughLinks(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("inner", filepath.Join(root, "in")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"out/file", "in/file", "out/deep/file"} {
		_, st := unpackInto(t, root, nil, file(name, "x"))
		if st.Error == "" {
			t.Errorf("%s: status %+v, want an error", name, st)
		}
	}
	assertOnly(t, outside)
	assertOnly(t, filepath.Join(root, "inner"))

	// A file written where a link is replaces the link.
	if err := os.WriteFile(filepath.Join(outside, "target"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	if _, st := unpackInto(t, root, nil, file("l", "new")); st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "keep" {
		t.Errorf("the link's target became %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(root, "l")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("l is %v, %v, want a regular file", fi.Mode(), err)
	}
}

func TestUnpackReplacesFolderByFile(t *testing.T) {
	root := t.TempDir()
	unpackInto(t, root, nil, file("d/a", "1"), file("d/b/c", "2"))
	if _, st := unpackInto(t, root, nil, file("d", "now a file")); st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	if b, err := os.ReadFile(filepath.Join(root, "d")); err != nil || string(b) != "now a file" {
		t.Errorf("d: %q, %v", b, err)
	}
}

func TestUnpackRemove(t *testing.T) {
	root := t.TempDir()
	unpackInto(t, root, nil, file("keep", "k"), file("d/a", "1"), file("d/b/c", "2"), file("inner/x", "x"), link("in", "inner"))
	f, st := unpackInto(t, root, nil, removal("d"), removal("in/x"), removal("missing/x"))
	if st.Error != "" || st.Entries != 3 {
		t.Fatalf("status %+v", st)
	}
	for _, e := range f.entries {
		if e.Kind != KindWhiteout {
			t.Errorf("entry %+v, want a whiteout", e)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "d")); !os.IsNotExist(err) {
		t.Errorf("d still there: %v", err)
	}
	// in/x is below a link: not there, so nothing is removed through it.
	if _, err := os.Lstat(filepath.Join(root, "inner/x")); err != nil {
		t.Errorf("inner/x removed through the link: %v", err)
	}
	assertOnly(t, root, "in", "inner", "keep")
}

func TestUnpackReset(t *testing.T) {
	root := t.TempDir()
	unpackInto(t, root, nil, file("old", "o"), file("d/a", "1"), link("l", "/"))
	if _, st := unpackInto(t, root, []string{"-reset"}, file("new", "n")); st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	assertOnly(t, root, "new")
}

// assertOnly checks that folder holds exactly names.
func assertOnly(t *testing.T, folder string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(folder)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %q, want %q", folder, got, names)
	}
}

// A save keeps a script runnable, and a plain file plain; a file's entry
// without the record takes the mode the tar gives it.
func TestUnpackSaveKeepsTheExecutableBits(t *testing.T) {
	root := t.TempDir()
	script, plain := file("run.sh", "#!/bin/sh\n"), file("notes", "n")
	script.mode = 0o750
	unpackInto(t, root, nil, script, plain, file("other.sh", "#!/bin/sh\n"))
	if err := os.Chmod(filepath.Join(root, "other.sh"), 0o755); err != nil { // as a command's chmod +x
		t.Fatal(err)
	}
	if _, st := unpackInto(t, root, nil, save("run.sh", "#!/bin/sh\necho two\n"), save("notes", "m"), save("new", "x"), file("other.sh", "#!/bin/sh\n")); st.Error != "" {
		t.Fatal(st.Error)
	}
	for name, want := range map[string]fs.FileMode{"run.sh": 0o754, "notes": 0o644, "new": 0o644, "other.sh": 0o644} {
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
}
