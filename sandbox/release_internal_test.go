//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// What a stopped server left mounted in its data folder goes: checkouts,
// one inside another, a file still open in one, and the loop device of a
// disk image below it; the folder can then be removed.
func TestReleaseBelowTakesWhatIsMountedThere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, to mount and attach loop devices")
	}
	dir := t.TempDir()
	checkout := filepath.Join(dir, "data", "sandboxes", "edit_1", "checkout")
	inner := filepath.Join(checkout, "inner")
	for _, p := range []string{checkout, inner} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	held, err := os.Create(filepath.Join(inner, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	img := filepath.Join(dir, "data", "sandbox-disks", "edit_1.img")
	os.MkdirAll(filepath.Dir(img), 0o755)
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop := filepath.Base(strings.TrimSpace(string(out)))
	// Beside it, what is not below the folder stays.
	other := t.TempDir()
	if err := unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(other, unix.MNT_DETACH)

	if err := ReleaseBelow(dir); err != nil {
		t.Fatal(err)
	}
	below := func(p string) bool { return strings.HasPrefix(p, dir+"/") }
	if left, _ := mountsWhere(below); len(left) != 0 {
		t.Errorf("still mounted: %v", left)
	}
	if _, err := os.Stat(filepath.Join("/sys/block", loop, "loop", "backing_file")); err == nil {
		t.Errorf("%s is still attached to the image", loop)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("the folder cannot be removed: %v", err)
	}
	if kept, _ := mountsWhere(func(p string) bool { return p == other }); len(kept) != 1 {
		t.Error("a mount outside the folder was taken too")
	}
}
