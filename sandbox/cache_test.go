//go:build linux

package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
)

// projectCache mounts a cache disk of size bytes as the server does and
// answers the folder in it that sessions see at HOME/.cache.
func projectCache(t *testing.T, size int64) (folder, image string) {
	t.Helper()
	area, images := openDir(t), t.TempDir()
	top, image := filepath.Join(area, "p1"), filepath.Join(images, "p1.img")
	if err := sandbox.MountCache(image, top, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sandbox.UnmountDisk(image, top); err != nil {
			t.Error(err)
		}
	})
	return filepath.Join(top, "cache"), image
}

// runCached runs script in the session with the cache at folder and fails
// the test unless it exits 0.
func (s *session) runCached(t *testing.T, folder, script string) string {
	t.Helper()
	spec := s.spec(script)
	spec.Cache = folder
	res, err := s.sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d\nstdout: %s\nstderr: %s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// The project's cache is HOME/.cache inside, where the usual tools' caches
// point; what one session wrote there, the next session (another uid) finds
// and may rewrite once the cache is handed to it. The bind names no host
// folder and is nosuid and nodev.
func TestCacheIsHomeCache(t *testing.T) {
	sb := newSandbox(t, nil)
	folder, _ := projectCache(t, sandbox.MinDiskBytes)
	a, b := newSession(t, sb), newSession(t, sb)
	if err := sandbox.GiveCache(folder, a.uid, a.uid); err != nil {
		t.Fatal(err)
	}
	out := a.runCached(t, folder, `mkdir -p ~/.cache/tool && echo from-a > ~/.cache/tool/entry
echo "$XDG_CACHE_HOME $GOCACHE $GOMODCACHE $npm_config_cache $PIP_CACHE_DIR"
grep ' /home/atelier/.cache ' /proc/self/mountinfo`)
	got := lines([]byte(out))
	if len(got) != 2 || got[0] != "/home/atelier/.cache /home/atelier/.cache/go-build /home/atelier/.cache/go-mod /home/atelier/.cache/npm /home/atelier/.cache/pip" {
		t.Fatalf("environment and mount inside:\n%s", out)
	}
	fields := strings.Fields(got[1])
	if fields[3] != "/cache" || !strings.Contains(fields[5], "nosuid") || !strings.Contains(fields[5], "nodev") {
		t.Errorf("the cache's mount line: %s", got[1])
	}
	if b, err := os.ReadFile(filepath.Join(folder, "tool", "entry")); err != nil || string(b) != "from-a\n" {
		t.Fatalf("what a wrote is not in the project's cache: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(a.home, ".cache", "tool")); err == nil {
		t.Error("the write went to a's own HOME, not to the cache")
	}

	// Not yet b's: a's alone.
	if out := b.runCached(t, folder, `ls ~/.cache >/dev/null 2>&1 || echo refused`); out != "refused\n" {
		t.Fatalf("b before the cache is handed to it: %q", out)
	}
	if err := sandbox.GiveCache(folder, b.uid, b.uid); err != nil {
		t.Fatal(err)
	}
	if out := b.runCached(t, folder, `echo from-b > ~/.cache/tool/entry && touch ~/.cache/tool/new && cat ~/.cache/tool/entry`); out != "from-b\n" {
		t.Fatalf("b once the cache is its: %q", out)
	}
	if fileExists("/usr/local/go/bin/go") {
		if out := b.runCached(t, folder, `go env GOCACHE GOMODCACHE`); out != "/home/atelier/.cache/go-build\n/home/atelier/.cache/go-mod\n" {
			t.Errorf("go env inside: %q", out)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// The folder the cache covers is in the session's HOME, which the session
// may have made a link: the cache is then not bound, and nothing is bound
// where the link leads (here the jail's /etc, whose passwd would become
// the session's to write).
func TestCacheMountPointIsNotFollowed(t *testing.T) {
	sb := newSandbox(t, nil)
	folder, _ := projectCache(t, sandbox.MinDiskBytes)
	s := newSession(t, sb)
	if err := sandbox.GiveCache(folder, s.uid, s.uid); err != nil {
		t.Fatal(err)
	}
	s.runCached(t, folder, `echo planted > ~/.cache/passwd`)
	s.mustRun(t, `rm -rf ~/.cache && ln -s ../../etc ~/.cache`)
	out := s.runCached(t, folder, `readlink ~/.cache; grep -c '^atelier:' /etc/passwd; grep -c ' /etc ' /proc/self/mountinfo`)
	if out != "../../etc\n1\n1\n" {
		t.Errorf("with HOME/.cache a link to the jail's /etc: %q", out)
	}
}

// GiveCache hands over everything below the folder, read-only folders and
// links included, without following a link out of the cache.
func TestGiveCacheHandsOverAll(t *testing.T) {
	sb := newSandbox(t, nil)
	folder, _ := projectCache(t, sandbox.MinDiskBytes)
	a, b := newSession(t, sb), newSession(t, sb)
	if err := sandbox.GiveCache(folder, a.uid, a.uid); err != nil {
		t.Fatal(err)
	}
	a.runCached(t, folder, `mkdir -p ~/.cache/go-mod/m@v1/sub && echo x > ~/.cache/go-mod/m@v1/sub/f.go && chmod -R a-w ~/.cache/go-mod/m@v1
ln -s /etc/hostname ~/.cache/host-link && ln -s "$(printf '../%.0s' $(seq 20))tmp" ~/.cache/up`)
	host := ownerOf(t, "/etc/hostname")
	if err := sandbox.GiveCache(folder, b.uid, b.uid); err != nil {
		t.Fatal(err)
	}
	var wrong []string
	err := filepath.WalkDir(folder, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if o := ownerOf(t, p); o != b.uid {
			wrong = append(wrong, p+" "+strconv.Itoa(int(o)))
		}
		return nil
	})
	if err != nil || len(wrong) > 0 {
		t.Errorf("not handed over: %v %v", wrong, err)
	}
	if ownerOf(t, "/etc/hostname") != host {
		t.Error("a link was followed out of the cache")
	}
	b.runCached(t, folder, `chmod u+w ~/.cache/go-mod/m@v1/sub && echo y > ~/.cache/go-mod/m@v1/sub/g.go`)
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid
}

// TrimCache removes what was used least recently, by reads as well as
// writes (every read counts, not only the first after a write), until the
// disk holds what it may keep; a read-only folder (a Go module's source)
// goes or stays whole.
func TestTrimCacheEvictsLeastRecentlyUsed(t *testing.T) {
	sb := newSandbox(t, nil)
	folder, _ := projectCache(t, 32<<20)
	s := newSession(t, sb)
	if err := sandbox.GiveCache(folder, s.uid, s.uid); err != nil {
		t.Fatal(err)
	}
	// The kernel's file times move in clock ticks (4 ms at 250 Hz).
	s.runCached(t, folder, `cd ~/.cache && set -e
head -c 3M /dev/urandom > a; sleep 0.05
head -c 3M /dev/urandom > b; sleep 0.05
mkdir -p mod@v1 && head -c 2M /dev/urandom > mod@v1/one && head -c 2M /dev/urandom > mod@v1/two && chmod -R a-w mod@v1; sleep 0.05
cat a > /dev/null; sleep 0.05
head -c 3M /dev/urandom > c; sleep 0.05
cat b > /dev/null; sleep 0.05
cat mod@v1/one > /dev/null; sleep 0.05
cat a > /dev/null; sync`)
	// Last used, oldest first: c (written), b (read), mod@v1 (one of its
	// files read), a (read twice; only a second read puts it last).
	used := diskUsed(t, folder)
	freed, err := sandbox.TrimCache(folder, used-4<<20)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.WalkDir(folder, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, strings.TrimPrefix(p, folder+"/"))
		}
		return nil
	})
	if want := []string{"a", "mod@v1/one", "mod@v1/two"}; !slices.Equal(left, want) {
		t.Errorf("after trimming 4 MiB: %q left, want %q", left, want)
	}
	if freed < 6<<20 || diskUsed(t, folder) > used-4<<20 {
		t.Errorf("freed %d bytes; the disk holds %d, was %d", freed, diskUsed(t, folder), used)
	}
	// Under the bound: nothing goes.
	if freed, err := sandbox.TrimCache(folder, used); err != nil || freed != 0 {
		t.Errorf("trimming under the bound: %d, %v", freed, err)
	}

	// Room again for the next session: the oldest whole module goes, not a
	// file of it.
	if _, err := sandbox.TrimCache(folder, diskUsed(t, folder)-1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(folder, "mod@v1")); !os.IsNotExist(err) {
		t.Errorf("the module is still there (%v), or went in part", err)
	}
	if _, err := os.Stat(filepath.Join(folder, "a")); err != nil {
		t.Errorf("a, used last, went: %v", err)
	}
}

func diskUsed(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// A cache disk unmounted at a clean stop is mounted again with what it
// held; one a killed server left attached is removed at the next start,
// since its file system, without a journal, may be half written.
func TestCacheSurvivesACleanStop(t *testing.T) {
	needRoot(t)
	area, images := openDir(t), t.TempDir()
	clean, killed := filepath.Join(area, "p1"), filepath.Join(area, "p2")
	for _, top := range []string{clean, killed} {
		if err := sandbox.MountCache(filepath.Join(images, filepath.Base(top)+".img"), top, sandbox.MinDiskBytes); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(top, "kept"), []byte("yes"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := sandbox.UnmountCache(clean); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.CleanCaches(images); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(images, "*")); !slices.Equal(left, []string{filepath.Join(images, "p1.img")}) {
		t.Fatalf("images after the start's cleaning: %q, want the cleanly stopped one's alone", left)
	}
	if err := sandbox.MountCache(filepath.Join(images, "p1.img"), clean, sandbox.MinDiskBytes); err != nil {
		t.Fatal(err)
	}
	defer sandbox.UnmountDisk(filepath.Join(images, "p1.img"), clean)
	if b, err := os.ReadFile(filepath.Join(clean, "kept")); err != nil || string(b) != "yes" {
		t.Errorf("the cache after a clean stop: %q, %v", b, err)
	}
}

// A cache disk whose file system still lives elsewhere (in the mount
// namespace of a helper started while it was mounted) is mounted again
// from the same loop device: a second device over one image would be a
// second file system writing its blocks.
func TestCacheMountedOnceOverItsImage(t *testing.T) {
	needRoot(t)
	area, images := openDir(t), t.TempDir()
	image, first, held, again := filepath.Join(images, "p1.img"), filepath.Join(area, "p1"), filepath.Join(area, "held"), filepath.Join(area, "again")
	if err := sandbox.MountCache(image, first, sandbox.MinDiskBytes); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(held, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(first, held, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(held, unix.MNT_DETACH)
	if err := sandbox.UnmountCache(first); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.MountCache(image, again, sandbox.MinDiskBytes); err != nil {
		t.Fatal(err)
	}
	defer sandbox.UnmountCache(again)
	if err := os.WriteFile(filepath.Join(held, "x"), []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(again, "x")); err != nil || string(b) != "one" {
		t.Errorf("written through the first mount, read through the second: %q, %v", b, err)
	}
	if loops := loopsOf(images); len(loops) != 1 {
		t.Errorf("loop devices over the image: %v", loops)
	}
}
