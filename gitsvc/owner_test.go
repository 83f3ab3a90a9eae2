package gitsvc

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"atelier/testrig/hostilegit"
)

// nobody is the host account that owns the hostile folders.
const nobody = hostilegit.Owner

// hostileRepo is hostilegit.Repo in a folder of this test, by its real path.
func hostileRepo(t *testing.T) (folder, log, head string) {
	t.Helper()
	return hostilegit.Repo(t, realDir(t), map[string]string{"a.txt": "hello\n"})
}

// Git in a folder that belongs to someone else runs as its owner: the
// service reads it without any safe.directory exception, and a program
// the folder's config names runs, if at all, with the owner's uid and gid
// and no group of root's.
func TestLocalRepoRunsAsOwner(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	folder, log, head := hostileRepo(t)

	r, err := s.OpenLocal(ctx, folder)
	if err != nil {
		t.Fatalf("OpenLocal of a folder owned by %d: %v", nobody, err)
	}
	if r.owner == nil || r.owner.uid != nobody || r.owner.gid != nobody {
		t.Fatalf("OpenLocal owner = %+v, want %d:%d", r.owner, nobody, nobody)
	}
	commit, branch, err := s.Head(ctx, r)
	if err != nil || branch != "main" || commit != head {
		t.Fatalf("Head = %s %q %v", commit, branch, err)
	}
	rs, err := s.Remotes(ctx, folder)
	if err != nil || !rs.IsRepo || len(rs.Remotes) != 1 {
		t.Fatalf("Remotes = %+v %v", rs, err)
	}
	if _, entries, err := s.ListAll(ctx, r, commit); err != nil || len(entries) != 2 {
		t.Fatalf("ListAll = %v %v", entries, err)
	}
	if data, _, err := s.ReadBlob(ctx, r, commit, "a.txt"); err != nil || string(data) != "hello\n" {
		t.Fatalf("ReadBlob = %q %v", data, err)
	}

	// The lock file the service made in the folder's git dir is the
	// owner's, like everything else there.
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(folder, ".git", lockName), &st); err != nil || st.Uid != nobody || st.Gid != nobody {
		t.Fatalf("lock file: %v, owned by %d:%d, want %d:%d", err, st.Uid, st.Gid, nobody, nobody)
	}

	// A command that does run the folder's clean filter, as git would for
	// the owner: it runs as the owner, with no supplementary groups.
	if _, err := s.run(ctx, newCommand("hash-object", "a.txt"), runOpts{repo: r, workTree: r.WorkTree}); err != nil {
		t.Fatal(err)
	}
	got := hostilegit.Marks(t, log)
	if len(got) == 0 {
		t.Fatal("hash-object ran no filter: the test proves nothing")
	}
	for _, m := range got {
		if _, ids, _ := strings.Cut(m, " "); ids != "65534 65534" {
			t.Fatalf("a filter ran as %q, want uid 65534 with group 65534 alone", m)
		}
	}

	// A session's fork copies the base commit's objects, read as the
	// owner; root never reads through the folder's objects later, so
	// the fork works with the folder gone and holds no alternates.
	fork, err := s.Fork(ctx, r, commit, "fork")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(fork.GitDir, "objects", "info", "alternates")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the fork of a folder of someone else's reads it through alternates: %v", err)
	}
	if err := os.Rename(folder, folder+".gone"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(folder+".gone", folder)
	if _, entries, err := s.ListAll(ctx, fork, commit); err != nil || len(entries) != 2 {
		t.Fatalf("ListAll of the fork = %v %v", entries, err)
	}
	var out bytes.Buffer
	if err := s.Archive(ctx, fork, commit, &out); err != nil {
		t.Fatal(err)
	}
	if e := tarEntries(t, out.Bytes())["a.txt"]; e.content != "hello\n" {
		t.Fatalf("archived a.txt = %q", e.content)
	}
	if bad := hostilegit.NotAsOwner(t, log); len(bad) > 0 {
		t.Fatalf("programs of the folder's config ran as root: %q", bad)
	}
}

// A folder's owner may put links where the service keeps its lock file;
// root follows none of them, so it creates and opens nothing elsewhere.
func TestLocalLockFileFollowsNoLink(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	folder, _, _ := hostileRepo(t)
	r, err := s.OpenLocal(ctx, folder)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(realDir(t), "created-by-root")
	lock := filepath.Join(folder, ".git", lockName)
	os.Remove(lock)
	if err := os.Symlink(elsewhere, lock); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Head(ctx, r); err == nil {
		t.Fatal("Head took a lock through a link")
	}
	if _, err := os.Lstat(elsewhere); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a lock through a link created %s: %v", elsewhere, err)
	}

	// A link in place of the git dir itself, after OpenLocal resolved it.
	os.Remove(lock)
	gitDir := filepath.Join(folder, ".git")
	if err := os.Rename(gitDir, gitDir+".moved"); err != nil {
		t.Fatal(err)
	}
	dest := realDir(t)
	if err := os.Symlink(dest, gitDir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.rlock(ctx, r, false); err == nil {
		t.Fatal("a lock through a linked git dir was taken")
	}
	if _, err := os.Lstat(filepath.Join(dest, lockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a lock through a linked git dir created a file there: %v", err)
	}
}

// Root runs git only in a folder root owns, and git's own ownership check
// still holds there: a git dir that belongs to someone else, under a
// folder of root's or the other way round, is refused rather than read by
// the wrong account.
func TestLocalOwnershipMismatchIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, since the folders are given to another account")
	}
	ctx := testContext(t)
	s := newService(t)
	own := newRepo(t)
	r, err := s.OpenLocal(ctx, own)
	if err != nil || r.owner != nil {
		t.Fatalf("OpenLocal of root's own folder = %+v %v, want it run as root", r, err)
	}

	foreignGitDir, _, _ := hostileRepo(t)
	if err := os.Lchown(foreignGitDir, 0, 0); err != nil {
		t.Fatal(err)
	}
	foreignTop, _, _ := hostileRepo(t)
	hostilegit.Chown(t, filepath.Join(foreignTop, ".git"), 0)
	for name, folder := range map[string]string{"root's folder, another's .git": foreignGitDir, "another's folder, root's .git": foreignTop} {
		if r, err := s.OpenLocal(ctx, folder); err == nil || !strings.Contains(err.Error(), "dubious ownership") {
			t.Errorf("%s: OpenLocal = %+v %v, want git's refusal", name, r, err)
		}
	}
}

// The owner's worktree can make git name any folder as the common git dir
// (its commondir file); the service makes no lock file in one that is not
// the owner's, such as a root-owned repository elsewhere on the host.
func TestLocalGitDirOfAnotherAccountIsRefused(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	folder, _, _ := hostileRepo(t)
	base := filepath.Dir(folder)
	shared := filepath.Join(base, "shared.git") // root's, readable by all
	tgit(t, base, "init", "-q", "--bare", shared)
	tgit(t, base, "--git-dir="+shared, "symbolic-ref", "HEAD", "refs/heads/main")
	private := filepath.Join(base, "private-gitdir")
	writeFile(t, filepath.Join(private, "HEAD"), "ref: refs/heads/main\n")
	writeFile(t, filepath.Join(private, "commondir"), shared+"\n")
	hostilegit.Chown(t, private, nobody)
	if err := os.RemoveAll(filepath.Join(folder, ".git")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(folder, ".git"), "gitdir: "+private+"\n")
	hostilegit.Chown(t, folder, nobody)

	r, err := s.OpenLocal(ctx, folder)
	if err != nil {
		t.Fatalf("OpenLocal: %v", err)
	}
	if r.GitDir != shared {
		t.Fatalf("git dir %s, want the crafted %s: the test proves nothing", r.GitDir, shared)
	}
	if _, _, err := s.Head(ctx, r); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("Head through another account's git dir: %v, want ErrBadArgument", err)
	}
	if _, err := os.Lstat(filepath.Join(shared, lockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a lock file was made in root's repository: %v", err)
	}
}
