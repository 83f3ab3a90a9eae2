package gitsvc

import (
	"strings"
	"testing"
)

// A composed commit holds exactly the edits on its parent's tree, whatever
// the paths' characters; a deletion goes, an OID edit lands as given, the
// parent's executable bit stays; and a path out of the tree is refused
// before git runs.
func TestComposeCommit(t *testing.T) {
	s := newService(t)
	ctx := testContext(t)
	r, first := mustCreate(t, s, "compose")
	tree, err := s.BuildTree(ctx, r, func(b *TreeBuilder) error {
		if err := b.File("run.sh", true, 3, strings.NewReader("a\n\n")); err != nil {
			return err
		}
		return b.File("old.txt", false, 4, strings.NewReader("old\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.CommitWithParents(ctx, r, tree, []string{first}, "base")
	if err != nil {
		t.Fatal(err)
	}
	odd := []string{`a "quoted" name.txt`, `back\slash.txt`, "sp ace/tab\there.txt", `"leading.txt`, "ünï/cödé.txt"}
	edits := []TreeEdit{{Path: "run.sh", Content: []byte("b\r\n")}, {Path: "old.txt", Deleted: true}}
	for i, p := range odd {
		edits = append(edits, TreeEdit{Path: p, Content: []byte(strings.Repeat("x", i) + "\xff no newline")})
	}
	commit, err := s.ComposeCommit(ctx, r, base, edits, Signature{Name: "ann", Email: "ann@users.atelier"}, "Edit\n\nbody", "refs/changes/one")
	if err != nil {
		t.Fatal(err)
	}
	dir := r.GitDir
	if got := tgit(t, dir, "rev-parse", "refs/changes/one"); strings.TrimSpace(got) != commit {
		t.Fatalf("ref at %s, want %s", got, commit)
	}
	if got := tgit(t, dir, "log", "-1", "--format=%P|%an|%ae|%B", commit); got != base+"|ann|ann@users.atelier|Edit\n\nbody" {
		t.Fatalf("commit %q", got)
	}
	if got := tgit(t, dir, "ls-tree", "--format=%(objectmode) %(path)", commit, "run.sh"); got != "100755 run.sh" {
		t.Fatalf("mode of run.sh %q", got)
	}
	if got := tgit(t, dir, "cat-file", "blob", commit+":run.sh"); got != "b\r" {
		t.Fatalf("run.sh %q", got)
	}
	for i, p := range odd {
		if got := tgit(t, dir, "cat-file", "blob", commit+":"+p); got != strings.Repeat("x", i)+"\xff no newline" {
			t.Fatalf("%q holds %q", p, got)
		}
	}
	if paths, err := s.ChangedPaths(ctx, r, base, commit); err != nil || len(paths) != len(odd)+2 {
		t.Fatalf("changed paths %q %v", paths, err)
	}
	blob := strings.TrimSpace(tgit(t, dir, "rev-parse", commit+":run.sh"))
	again, err := s.ComposeCommit(ctx, r, base, []TreeEdit{{Path: "copy.sh", OID: blob, Mode: "100755"}}, Signature{Name: "ann", Email: "a@x"}, "copy", "refs/changes/two")
	if err != nil {
		t.Fatal(err)
	}
	if got := tgit(t, dir, "ls-tree", "--format=%(objectmode) %(objectname)", again, "copy.sh"); got != "100755 "+blob {
		t.Fatalf("copy.sh %q", got)
	}
	for _, bad := range []string{"../x", ".git/config", "a/.GIT/b", "/abs", "a//b", ""} {
		if _, err := s.ComposeCommit(ctx, r, base, []TreeEdit{{Path: bad, Content: []byte("x")}}, Signature{Name: "a", Email: "a@x"}, "m", "refs/changes/bad"); err == nil {
			t.Errorf("%q was composed", bad)
		}
	}
	if _, err := s.ComposeCommit(ctx, r, base, edits[:1], Signature{Name: "a <evil>", Email: "a@x"}, "m", "refs/changes/three"); err == nil {
		t.Error("an author with <> was taken")
	}
}
