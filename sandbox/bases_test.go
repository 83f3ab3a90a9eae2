//go:build linux

package sandbox_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"atelier/sandbox"
)

// sharedBase is a base that workspaces may share (its ID), counting how
// often it is written; fail makes the next write fail halfway.
type sharedBase struct {
	tar    tarBase
	id     string
	writes *atomic.Int32
	fail   *atomic.Bool
}

func newSharedBase(t *testing.T, id string) sharedBase {
	return sharedBase{id: id, writes: new(atomic.Int32), fail: new(atomic.Bool), tar: tarOf(t,
		tarEntry{name: "a.txt", body: "base\n"},
		tarEntry{name: "run.sh", body: "echo ran\n", mode: 0o755},
		tarEntry{name: "dir", typ: tar.TypeDir},
		tarEntry{name: "dir/b.txt", body: "b\n"},
	)}
}

func (b sharedBase) ID() string { return b.id }

func (b sharedBase) WriteTar(ctx context.Context, w io.Writer) error {
	b.writes.Add(1)
	if b.fail.Swap(false) {
		w.Write(b.tar[:len(b.tar)/2])
		return errors.New("the export broke off")
	}
	return b.tar.WriteTar(ctx, w)
}

// basesArea is where newLocal's provider keeps shared trees.
func basesArea(sessions string) string { return filepath.Join(filepath.Dir(sessions), "bases") }

// trees lists the shared trees on the host.
func trees(t *testing.T, area string) []string {
	t.Helper()
	entries, err := os.ReadDir(area)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Two sessions of one base share one unpacked tree: it is written once,
// each session sees its files as its own user's and may change all of
// them, and what one changes (writes, modes, deletions, renames, links)
// lands in its own layer: the other session and the tree itself never see
// it. The tree goes with the last session on it.
func TestLocalSessionsOfOneBaseShareItsTree(t *testing.T) {
	l, sessions := newLocal(t)
	ctx := context.Background()
	base := newSharedBase(t, "c0ffee")
	a, b := localSession("edit_share_a"), localSession("edit_share_b")
	for _, s := range []sandbox.Session{a, b} {
		if p, err := l.Prepare(ctx, s, base); err != nil || !p.Fresh || !p.Layered {
			t.Fatalf("Prepare %s = %+v, %v", s.ID, p, err)
		}
	}
	if n := base.writes.Load(); n != 1 {
		t.Fatalf("the base was written %d times for two sessions, want once", n)
	}
	area := basesArea(sessions)
	shared := trees(t, area)
	if len(shared) != 1 {
		t.Fatalf("shared trees: %v, want one", shared)
	}
	tree := filepath.Join(area, shared[0])

	// Session a sees the files as its user's and changes every one.
	res := runIn(t, l, a, `stat -c '%u %a %n' a.txt run.sh dir dir/b.txt &&
		echo mine >> a.txt && chmod 600 run.sh && rm dir/b.txt && mv dir moved && ln a.txt hard && touch new.txt && echo done`)
	want := fmt.Sprintf("%d 644 a.txt\n%d 755 run.sh\n%d 755 dir\n%d 644 dir/b.txt\ndone\n", a.UID, a.UID, a.UID, a.UID)
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("session a: exit %d, stdout %q, stderr %q; want %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	// Session b sees the base as it was, as its own user's.
	res = runIn(t, l, b, `cat a.txt dir/b.txt && stat -c '%u %a %n' run.sh && ls`)
	want = fmt.Sprintf("base\nb\n%d 755 run.sh\na.txt\ndir\nrun.sh\n", b.UID)
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("session b: exit %d, stdout %q, stderr %q; want %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	// The tree on the host is root's and as unpacked.
	for name, wantMode := range map[string]os.FileMode{"a.txt": 0o644, "run.sh": 0o755, "dir": 0o755 | os.ModeDir, "dir/b.txt": 0o644} {
		fi, err := os.Lstat(filepath.Join(tree, name))
		if err != nil {
			t.Fatalf("the shared tree lost %s: %v", name, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != wantMode || st.Uid != 0 || st.Gid != 0 || !fi.IsDir() && st.Nlink != 1 {
			t.Errorf("shared %s: mode %v, owner %d:%d, links %d; want %v, root's", name, fi.Mode(), st.Uid, st.Gid, st.Nlink, wantMode)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(tree, "a.txt")); string(got) != "base\n" {
		t.Errorf("the shared a.txt holds %q", got)
	}
	if _, err := os.Lstat(filepath.Join(tree, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a session's new file reached the shared tree: %v", err)
	}

	// What a changed is what its own layer holds.
	var changed []string
	if err := l.Changed(ctx, a, 64, func(e sandbox.Entry) error {
		changed = append(changed, e.Path)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(changed)
	for _, p := range []string{"a.txt", "dir", "hard", "moved", "new.txt", "run.sh"} {
		if !slices.Contains(changed, p) {
			t.Errorf("a's changes %v lack %s", changed, p)
		}
	}

	// The tree stays while a session is on it, and goes with the last.
	if err := l.End(ctx, a); err != nil {
		t.Fatal(err)
	}
	if res := runIn(t, l, b, "cat a.txt"); string(res.Stdout) != "base\n" {
		t.Fatalf("b after a ended: %q %q", res.Stdout, res.Stderr)
	}
	if err := l.End(ctx, b); err != nil {
		t.Fatal(err)
	}
	if left := trees(t, area); len(left) != 0 {
		t.Fatalf("the shared tree outlived its sessions: %v", left)
	}
	// A later session unpacks it again.
	c := localSession("edit_share_c")
	if _, err := l.Prepare(ctx, c, base); err != nil {
		t.Fatal(err)
	}
	if n := base.writes.Load(); n != 2 {
		t.Fatalf("the base was written %d times, want twice", n)
	}
}

// Sessions that start from one base at the same moment wait for one
// unpacking of it.
func TestLocalUnpacksASharedBaseOnceForConcurrentSessions(t *testing.T) {
	l, sessions := newLocal(t)
	ctx := context.Background()
	base := newSharedBase(t, "5ca1ab1e")
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		s := localSession(fmt.Sprintf("edit_at_once_%d", i))
		wg.Go(func() {
			if _, errs[i] = l.Prepare(ctx, s, base); errs[i] == nil {
				if res := runIn(t, l, s, "cat a.txt"); string(res.Stdout) != "base\n" {
					errs[i] = fmt.Errorf("%s reads %q %q", s.ID, res.Stdout, res.Stderr)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := base.writes.Load(); n != 1 {
		t.Fatalf("the base was written %d times, want once", n)
	}
	if got := trees(t, basesArea(sessions)); len(got) != 1 {
		t.Fatalf("shared trees: %v, want one", got)
	}
}

// An unpacking that fails leaves no tree behind for the next session to
// take: its Prepare fails, and the next one unpacks afresh.
func TestLocalRetriesASharedBaseThatFailed(t *testing.T) {
	l, sessions := newLocal(t)
	ctx := context.Background()
	base := newSharedBase(t, "badc0de")
	base.fail.Store(true)
	s := localSession("edit_share_fail")
	if _, err := l.Prepare(ctx, s, base); err == nil || !strings.Contains(err.Error(), "broke off") {
		t.Fatalf("Prepare on a broken export: %v", err)
	}
	if got := trees(t, basesArea(sessions)); len(got) != 0 {
		t.Fatalf("a failed tree stayed: %v", got)
	}
	if _, err := l.Prepare(ctx, s, base); err != nil {
		t.Fatal(err)
	}
	if res := runIn(t, l, s, "cat dir/b.txt"); string(res.Stdout) != "b\n" {
		t.Fatalf("after the retry: %q %q", res.Stdout, res.Stderr)
	}
	if n := base.writes.Load(); n != 2 {
		t.Fatalf("the base was written %d times, want twice", n)
	}
}

// A tree a previous run left behind goes at the next start.
func TestLocalRecoverRemovesLeftSharedTrees(t *testing.T) {
	l, sessions := newLocal(t)
	left := filepath.Join(basesArea(sessions), "t99", "deep")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := trees(t, basesArea(sessions)); len(got) != 0 {
		t.Fatalf("left trees after Recover: %v", got)
	}
}
