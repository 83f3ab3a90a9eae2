package editsession

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"atelier/projects"
	"atelier/workspace"
)

// changesOf is the session's changes as path → status.
func (f *fixture) changesOf(sess *Session) map[string]string {
	f.t.Helper()
	cs, err := f.sessions.Changes(f.ctx, sess)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range cs {
		out[c.Path] = c.Status
	}
	return out
}

func (f *fixture) text(sess *Session, path string) string {
	f.t.Helper()
	file, err := f.sessions.Read(f.ctx, sess, path)
	if err != nil {
		f.t.Fatalf("Read(%q): %v", path, err)
	}
	return string(file.Content)
}

// TestRenameFile: a rename is a deletion of the old path and an addition
// of the same bytes, an edited file moves with its edit, and renaming back
// leaves no change at all.
func TestRenameFile(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	moves, err := f.sessions.Rename(f.ctx, sess, "crlf.txt", "docs/lines.txt")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Move{{From: "crlf.txt", To: "docs/lines.txt"}}; !reflect.DeepEqual(moves, want) {
		t.Fatalf("moves = %+v, want %+v", moves, want)
	}
	if got := f.text(sess, "docs/lines.txt"); got != base["crlf.txt"] {
		t.Fatalf("moved bytes = %q, want %q", got, base["crlf.txt"])
	}
	if got, want := f.changesOf(sess), map[string]string{"crlf.txt": Deleted, "docs/lines.txt": Added}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
	if _, err := f.sessions.Rename(f.ctx, sess, "docs/lines.txt", "crlf.txt"); err != nil {
		t.Fatal(err)
	}
	if got := f.changesOf(sess); len(got) != 0 {
		t.Fatalf("renaming back left changes %v", got)
	}

	// An added file moves with its text and leaves nothing behind.
	if _, err := f.save(sess, "notes.txt", "mine\n", Precondition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sessions.Rename(f.ctx, sess, "notes.txt", "src/notes.txt"); err != nil {
		t.Fatal(err)
	}
	if got, want := f.changesOf(sess), map[string]string{"src/notes.txt": Added}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
}

// TestRenameFolder moves every file of a folder, base and added alike,
// skipping the ones the session deleted.
func TestRenameFolder(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	if _, err := f.save(sess, "src/extra/new.go", "package extra\n", Precondition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.save(sess, "src/gone.txt", "x", Precondition{}); err != nil {
		t.Fatal(err)
	}
	if err := f.sessions.Delete(f.ctx, sess, "src/gone.txt", Precondition{}); err != nil {
		t.Fatal(err)
	}
	moves, err := f.sessions.Rename(f.ctx, sess, "src", "lib")
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(moves, func(i, j int) bool { return moves[i].From < moves[j].From })
	want := []Move{{"src/extra/new.go", "lib/extra/new.go"}, {"src/main.go", "lib/main.go"}}
	if !reflect.DeepEqual(moves, want) {
		t.Fatalf("moves = %+v, want %+v", moves, want)
	}
	if got := f.text(sess, "lib/main.go"); got != base["src/main.go"] {
		t.Fatalf("lib/main.go = %q", got)
	}
	got := f.changesOf(sess)
	wantChanges := map[string]string{"src/main.go": Deleted, "lib/main.go": Added, "lib/extra/new.go": Added}
	if !reflect.DeepEqual(got, wantChanges) {
		t.Fatalf("changes = %v, want %v", got, wantChanges)
	}
}

// TestRenameRefusals: each refusal has its own error, and leaves the
// session's edits as they were.
func TestRenameRefusals(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	if _, err := f.save(sess, "src/a.txt", "a\n", Precondition{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, from, to string
		want           error
	}{
		{"onto a file", "crlf.txt", "src/main.go", ErrExists},
		{"onto a folder", "crlf.txt", "src", ErrExists},
		{"onto its own folder", "src/main.go", "src", ErrExists},
		{"under a file", "crlf.txt", "src/main.go/x", ErrNotAFolder},
		{"into itself", "src", "src/inner", ErrIntoItself},
		{"same", "src", "src", ErrSamePath},
		{"missing", "nope.txt", "yes.txt", ErrFileNotFound},
		{"too large", "big.txt", "big2.txt", ErrTooLarge},
		{"parent", "crlf.txt", "../crlf.txt", workspace.ErrBadPath},
		{"climbing", "crlf.txt", "src/../../x", workspace.ErrBadPath},
		{"absolute", "crlf.txt", "/etc/x", workspace.ErrBadPath},
		{"git", "crlf.txt", ".git/hooks/pre-commit", workspace.ErrBadPath},
		{"git case", "crlf.txt", "src/.GIT/config", workspace.ErrBadPath},
		{"NUL", "crlf.txt", "a\x00b", workspace.ErrBadPath},
		{"newline", "crlf.txt", "a\nb", workspace.ErrBadPath},
		{"escape", "crlf.txt", "a\x1b[2Jb", workspace.ErrBadPath},
		{"C1", "crlf.txt", "a\u0085b", workspace.ErrBadPath},
		{"trailing slash", "crlf.txt", "dir/", workspace.ErrBadPath},
		{"empty", "crlf.txt", "", workspace.ErrBadPath},
		{"from the parent", "../x", "y", workspace.ErrBadPath},
	}
	before := f.changesOf(sess)
	for _, tt := range tests {
		if _, err := f.sessions.Rename(f.ctx, sess, tt.from, tt.to); !errors.Is(err, tt.want) {
			t.Errorf("%s: Rename(%q, %q) = %v, want %v", tt.name, tt.from, tt.to, err, tt.want)
		}
	}
	if got := f.changesOf(sess); !reflect.DeepEqual(got, before) {
		t.Fatalf("refused renames changed the session: %v, was %v", got, before)
	}
}

// TestRenameBounds: a folder of more files than MaxMoveFiles, and a rename
// that would take the session past MaxPaths, are refused whole.
func TestRenameBounds(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	for i := 0; i <= MaxMoveFiles; i++ {
		if _, err := f.save(sess, fmt.Sprintf("many/f%03d.txt", i), "x", Precondition{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.sessions.Rename(f.ctx, sess, "many", "more"); !errors.Is(err, ErrTooManyMove) {
		t.Fatalf("Rename of %d files = %v, want ErrTooManyMove", MaxMoveFiles+1, err)
	}
	if _, err := f.sessions.DeleteFolder(f.ctx, sess, "many"); !errors.Is(err, ErrTooManyMove) {
		t.Fatalf("DeleteFolder of %d files = %v, want ErrTooManyMove", MaxMoveFiles+1, err)
	}
	// Fill the session to its path limit less one: moving a base file
	// needs two paths.
	for i := MaxMoveFiles + 1; i < MaxPaths-1; i++ {
		if _, err := f.save(sess, fmt.Sprintf("many/f%03d.txt", i), "x", Precondition{}); err != nil {
			t.Fatal(err)
		}
	}
	before := f.changesOf(sess)
	if _, err := f.sessions.Rename(f.ctx, sess, "crlf.txt", "moved.txt"); !errors.Is(err, ErrTooManyPaths) {
		t.Fatalf("Rename past the path limit = %v, want ErrTooManyPaths", err)
	}
	if got := f.changesOf(sess); !reflect.DeepEqual(got, before) {
		t.Fatalf("a refused rename changed %d paths into %d", len(before), len(got))
	}
	// Moving an added file takes no extra path.
	if _, err := f.sessions.Rename(f.ctx, sess, "many/f000.txt", "moved.txt"); err != nil {
		t.Fatal(err)
	}
}

// TestRenameKeepsModes: a session keeps contents only, so an executable is
// refused rather than silently made a plain file.
func TestRenameKeepsModes(t *testing.T) {
	f := newFixture(t)
	repo, err := f.git.OpenBare(projects.CanonicalName(f.owner.Project.ID))
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "bin", "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "bin", "notes.txt"), []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit, err := f.git.CommitTree(f.ctx, repo, tree, []string{*f.owner.Project.CanonicalCommit}, "with an executable")
	if err != nil {
		t.Fatal(err)
	}
	f.owner.Project.CanonicalCommit = &commit
	sess := f.open()
	for _, from := range []string{"bin/run.sh", "bin"} {
		if _, err := f.sessions.Rename(f.ctx, sess, from, "x"); !errors.Is(err, ErrNotMovable) {
			t.Errorf("Rename(%q) = %v, want ErrNotMovable", from, err)
		}
	}
	if _, err := f.sessions.Rename(f.ctx, sess, "bin/notes.txt", "notes.txt"); err != nil {
		t.Fatal(err)
	}
}

// TestCreateDeleteRevert: new files, checked folder names, folder
// deletion and reverts.
func TestCreateDeleteRevert(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	etag, err := f.sessions.Create(f.ctx, sess, "docs/new.md")
	if err != nil {
		t.Fatal(err)
	}
	if etag != ETag(nil) || f.text(sess, "docs/new.md") != "" {
		t.Fatalf("a new file is not empty: %q", etag)
	}
	for path, want := range map[string]error{
		"docs/new.md": ErrExists, "src": ErrExists, "crlf.txt/x": ErrNotAFolder,
		"a\tb": workspace.ErrBadPath, ".git": workspace.ErrBadPath,
	} {
		if _, err := f.sessions.Create(f.ctx, sess, path); !errors.Is(err, want) {
			t.Errorf("Create(%q) = %v, want %v", path, err, want)
		}
		if err := f.sessions.CheckNewFolder(f.ctx, sess, path); !errors.Is(err, want) {
			t.Errorf("CheckNewFolder(%q) = %v, want %v", path, err, want)
		}
	}
	// A save makes no new file of such a name either.
	if _, err := f.save(sess, "bell\a.txt", "x", Precondition{}); !errors.Is(err, workspace.ErrBadPath) {
		t.Errorf("Save of a new name with a control character = %v", err)
	}
	if err := f.sessions.CheckNewFolder(f.ctx, sess, "docs/more"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sessions.DeleteFolder(f.ctx, sess, "crlf.txt"); !errors.Is(err, ErrFileNotFound) {
		t.Fatalf("DeleteFolder of a file = %v", err)
	}
	if _, err := f.save(sess, "src/added.go", "package main\n", Precondition{}); err != nil {
		t.Fatal(err)
	}
	deleted, err := f.sessions.DeleteFolder(f.ctx, sess, "src")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(deleted)
	if want := []string{"src/added.go", "src/main.go"}; !reflect.DeepEqual(deleted, want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	if got, want := f.changesOf(sess), map[string]string{"docs/new.md": Added, "src/main.go": Deleted}; !reflect.DeepEqual(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
	if err := f.sessions.Revert(f.ctx, sess, "src/main.go"); err != nil {
		t.Fatal(err)
	}
	if f.text(sess, "src/main.go") != base["src/main.go"] {
		t.Fatal("a restored file does not read as the base")
	}
	if err := f.sessions.Revert(f.ctx, sess, "src/main.go"); !errors.Is(err, ErrNotChanged) {
		t.Fatalf("Revert of an unchanged file = %v", err)
	}
}
