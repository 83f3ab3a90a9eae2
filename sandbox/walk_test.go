//go:build linux

package sandbox_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
)

// openDescriptors is how many descriptors this process holds now.
func openDescriptors(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries) - 1 // the listing's own
}

// peakDescriptors samples the process's descriptors every millisecond
// until stop is called, which answers the most it saw.
func peakDescriptors(t testing.TB) (stop func() int) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if entries, err := os.ReadDir("/proc/self/fd"); err == nil {
				if n := int64(len(entries) - 1); n > peak.Load() {
					peak.Store(n)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	return func() int {
		close(done)
		wg.Wait()
		return int(peak.Load())
	}
}

// deepTree makes depth nested folders "d" under dir, with a file in the
// deepest, holding one descriptor at a time.
func deepTree(t testing.TB, dir string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	f, err := unix.Openat(fd, "bottom.txt", unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(f)
	unix.Close(fd)
}

// TestWalkOfADeepTreeIsBounded: a tree thousands of folders deep is walked
// down to the depth asked, the folder there is reported and not entered,
// and the walk never holds more descriptors than that depth.
func TestWalkOfADeepTreeIsBounded(t *testing.T) {
	for _, depth := range []int{3000, 20000} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			dir := t.TempDir()
			deepTree(t, dir, depth)
			before := openDescriptors(t)
			peak := 0
			var visited, tooDeep int
			start := time.Now()
			err := sandbox.WalkTree(dir, sandbox.WalkOptions{MaxDepth: 64}, func(e *sandbox.TreeEntry) error {
				visited++
				if e.TooDeep {
					tooDeep++
					if e.Depth != 64 || e.Kind != sandbox.KindDir {
						t.Errorf("too deep: %+v", e)
					}
				}
				peak = max(peak, openDescriptors(t))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if visited != 64 || tooDeep != 1 {
				t.Fatalf("visited %d entries, %d too deep; want 64 and 1", visited, tooDeep)
			}
			if peak-before > 66 {
				t.Fatalf("the walk held %d descriptors more than before", peak-before)
			}
			t.Logf("walked in %v", time.Since(start))

			removing := time.Now()
			stop := peakDescriptors(t)
			if err := sandbox.RemoveTree(filepath.Join(dir, "d")); err != nil {
				t.Fatal(err)
			}
			t.Logf("removed in %v", time.Since(removing))
			if held := stop() - before; held > 100 {
				t.Fatalf("removing the tree held %d descriptors more than before", held)
			}
			if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
				t.Fatalf("left after the removal: %v %v", entries, err)
			}
		})
	}
}

// TestWalkSeesEveryEntryOfAWideFolderOnce: a folder of many entries is
// read a buffer at a time, each entry exactly once.
func TestWalkSeesEveryEntryOfAWideFolderOnce(t *testing.T) {
	dir := t.TempDir()
	const n = 20000
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	err := sandbox.WalkTree(dir, sandbox.WalkOptions{MaxDepth: 8}, func(e *sandbox.TreeEntry) error {
		if e.Kind != sandbox.KindFile || e.Depth != 1 {
			t.Errorf("%+v", e)
		}
		seen[e.Path]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d entries seen, want %d", len(seen), n)
	}
	for p, times := range seen {
		if times != 1 {
			t.Fatalf("%s seen %d times", p, times)
		}
	}
}

// TestWalkAndRemoveNeverFollowALink: a link to a folder outside is
// reported as a link and not entered; removing the tree removes the link
// and nothing it points at, also when the link stands where a folder was
// expected.
func TestWalkAndRemoveNeverFollowALink(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "precious.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"tree/out", "tree/a/b/out"} {
		if err := os.Symlink(outside, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	err := sandbox.WalkTree(tree, sandbox.WalkOptions{MaxDepth: 64}, func(e *sandbox.TreeEntry) error {
		got = append(got, fmt.Sprintf("%s %d", e.Path, e.Kind))
		if e.Kind == sandbox.KindFile {
			t.Errorf("a file behind a link was visited: %s", e.Path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{fmt.Sprintf("a %d", sandbox.KindDir), fmt.Sprintf("a/b %d", sandbox.KindDir),
		fmt.Sprintf("a/b/out %d", sandbox.KindLink), fmt.Sprintf("out %d", sandbox.KindLink)}
	if !slices.Equal(got, want) {
		t.Fatalf("walk: %q, want %q", got, want)
	}
	// The walked folder itself may not be a link.
	if err := sandbox.WalkTree(filepath.Join(tree, "out"), sandbox.WalkOptions{MaxDepth: 64}, func(*sandbox.TreeEntry) error { return nil }); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Fatalf("walking a link: %v", err)
	}
	if err := sandbox.RemoveTree(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tree is still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious.txt")); err != nil || string(b) != "keep" {
		t.Fatalf("the folder behind the link lost its file: %q %v", b, err)
	}
}

// TestRemoveTreeAtRemovesWhatIsThere: a file, a missing name and a folder
// of folders deeper than the removal's own depth all go, relative to an
// open folder.
func TestRemoveTreeAtRemovesWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	deepTree(t, filepath.Join(dir, "deep"), 500)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, name := range []string{"file", "missing", "deep"} {
		if err := sandbox.RemoveTreeAt(fd, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("left: %v %v", entries, err)
	}
}
