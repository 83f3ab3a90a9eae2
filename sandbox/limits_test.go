package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

// The parent group holds every session's group; its memory limit bounds
// all sessions together, even when each is under its own limit, and its
// CPU quota leaves the host half a core.
func TestLimitTotals(t *testing.T) {
	const total = 128 << 20
	parent := fmt.Sprintf("atelier-sandbox-test-%d", os.Getpid())
	sb := newSandbox(t, func(c *sandbox.Config) {
		c.MaxMemory, c.MaxMemoryTotal, c.CgroupParent = 1<<30, total, parent
	})
	if sb.CgroupMode() != "v1" {
		t.Skipf("precondition: writable cgroup v1 memory and pids hierarchies, as on this project's hosts; mode %q", sb.CgroupMode())
	}
	t.Cleanup(func() {
		for _, ctrl := range []string{"memory", "pids", "cpu"} {
			unix.Rmdir("/sys/fs/cgroup/" + ctrl + "/" + parent)
		}
	})
	for file, want := range map[string]string{
		"/sys/fs/cgroup/memory/" + parent + "/memory.limit_in_bytes": strconv.Itoa(total),
		"/sys/fs/cgroup/pids/" + parent + "/pids.max":                "",
		"/sys/fs/cgroup/cpu/" + parent + "/cpu.cfs_quota_us":         strconv.Itoa(max(100_000, runtime.NumCPU()*100_000-50_000)),
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.TrimSpace(string(b))
		if (want != "" && got != want) || got == "max" {
			t.Errorf("%s = %s, want %s", file, got, or(want, "a number"))
		}
	}
	s := newSession(t, sb)
	group := parent + "/u" + strconv.FormatUint(uint64(s.uid), 10) + "\n"
	if out := s.mustRun(t, `cat /proc/self/cgroup`); !strings.Contains(out, ":cpu:/"+group) || !strings.Contains(out, ":memory:/"+group) {
		t.Errorf("the command is not in the cpu and memory groups of its uid:\n%s", out)
	}
	s.mustRun(t, `python3 -c 'b = b"x" * (32 << 20)'`)
	// 512 MiB is within the session's own 1 GiB, beyond the total.
	res, err := s.run(t, `python3 -c 'b = b"x" * (512 << 20); print("allocated")'`)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "allocated") {
		t.Errorf("512 MiB under a 128 MiB total: %+v", res)
	}
	t.Logf("512 MiB: exit %d %s: %s", res.ExitCode, res.Signal, lastLine(res.Stderr))
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// A session's disk is a file system of its own: writing past it fails with
// ENOSPC in the command, the host's file system gives it no more than its
// size, and unmounting it leaves nothing behind.
func TestDiskBound(t *testing.T) {
	const size = 64 << 20
	sb := newSandbox(t, nil)
	area, images := openDir(t), t.TempDir()
	top, image := filepath.Join(area, "session"), filepath.Join(images, "s.img")
	if err := sandbox.MountDisk(image, top, size); err != nil {
		t.Fatal(err)
	}
	// Mounting again is a no-op, as for the next command of a session.
	if err := sandbox.MountDisk(image, top, size); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, sb)
	s.dir, s.home = filepath.Join(top, "checkout"), filepath.Join(top, "home")
	for _, d := range []string{s.dir, s.home} {
		if err := sandbox.PrepareDir(d, s.uid, s.uid); err != nil {
			t.Fatal(err)
		}
	}
	stderr := s.mustFail(t, `head -c 200M /dev/zero > big`)
	if !strings.Contains(stderr, "No space left on device") {
		t.Errorf("writing 200 MiB on a 64 MiB disk: %s", stderr)
	}
	out := s.mustRun(t, `stat -c %s big; head -c 1M /dev/zero > "$HOME/y" 2>&1 || echo refused`)
	if n, _ := strconv.Atoi(strings.Fields(out)[0]); n > size || n < size/2 {
		t.Errorf("the file reached %d bytes on a %d byte disk", n, size)
	}
	if !strings.Contains(out, "refused") {
		t.Errorf("HOME has room on a full disk: %s", out)
	}
	// What the host gave the disk is what its image holds, whatever else
	// writes to the host's disk meanwhile.
	if used := allocated(t, image); used > size {
		t.Errorf("the host gave %d bytes to a %d byte disk", used, size)
	}
	if err := sb.KillAll(context.Background(), s.uid); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.UnmountDisk(image, top); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{image, top} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	if loops := loopsOf(images); len(loops) > 0 {
		t.Errorf("loop devices still hold the image: %v", loops)
	}
}

// What a session deletes goes back to the host: 1 GiB written into the
// disk from a command and deleted again leaves the image holding about
// what it held empty, not the gigabyte.
func TestDiskReturnsFreedBlocks(t *testing.T) {
	const size = 2 << 30
	// slack is what the file system's own bookkeeping may keep of the
	// write (bitmaps, the inode, the folder's block) once the file is gone.
	const slack = 8 << 20
	sb := newSandbox(t, nil)
	area, images := openDir(t), t.TempDir()
	top, image := filepath.Join(area, "session"), filepath.Join(images, "s.img")
	if err := sandbox.MountDisk(image, top, size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sandbox.UnmountDisk(image, top) })
	s := newSession(t, sb)
	s.dir, s.home = filepath.Join(top, "checkout"), filepath.Join(top, "home")
	for _, d := range []string{s.dir, s.home} {
		if err := sandbox.PrepareDir(d, s.uid, s.uid); err != nil {
			t.Fatal(err)
		}
	}
	empty := allocated(t, image)
	// sync: the blocks are given at write-back, and only given blocks can
	// be freed.
	s.mustRun(t, `head -c 1G /dev/zero > big && sync`)
	if full := allocated(t, image); full < empty+1<<30 {
		t.Fatalf("the image holds %d bytes after 1 GiB was written, %d empty: the write did not reach it", full, empty)
	}
	s.mustRun(t, `rm big && sync`)
	unix.Sync()
	var now int64
	wait.Until(wait.Long, func() bool { now = allocated(t, image); return now <= empty+slack })
	t.Logf("the image holds %d bytes empty, %d once 1 GiB was written and deleted", empty, now)
	if now > empty+slack {
		t.Errorf("the image holds %d bytes once 1 GiB was written and deleted, %d empty: the freed blocks stayed with it", now, empty)
	}
}

// allocated is how many bytes of the host's disk the file takes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// Start-up cleans what a server that ended abruptly left: mounted disks and
// their images.
func TestCleanDisks(t *testing.T) {
	area, images := openDir(t), t.TempDir()
	var tops []string
	for i := range 2 {
		top := filepath.Join(area, "session"+strconv.Itoa(i))
		if err := sandbox.MountDisk(filepath.Join(images, strconv.Itoa(i)+".img"), top, sandbox.MinDiskBytes); err != nil {
			t.Fatal(err)
		}
		tops = append(tops, top)
	}
	if err := sandbox.CleanDisks(images); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(images, "*")); len(left) > 0 {
		t.Errorf("images left: %v", left)
	}
	for _, top := range tops {
		var st, parent unix.Stat_t
		if unix.Lstat(top, &st) == nil && unix.Lstat(area, &parent) == nil && st.Dev != parent.Dev {
			t.Errorf("%s is still mounted", top)
		}
	}
	// A disk's loop device clears itself once its lazily unmounted file
	// system is let go, which a loaded machine may take a moment to do.
	if !wait.Until(wait.Short, func() bool { return len(loopsOf(images)) == 0 }) {
		t.Errorf("loop devices still hold images: %v", loopsOf(images))
	}
}

// loopsOf lists the loop devices whose file lies in dir.
func loopsOf(dir string) []string {
	var out []string
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		b, err := os.ReadFile(l)
		if err == nil && strings.HasPrefix(string(b), dir+"/") {
			out = append(out, l)
		}
	}
	return out
}
