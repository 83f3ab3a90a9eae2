package liveserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A stopped server's folder goes with what was left mounted below it
// (checkouts, one inside another, a file still open in one) and the loop
// device of a disk image below it; nothing of it stays on the machine.
func TestRemoveDataTakesWhatIsMountedBelow(t *testing.T) {
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
	img := filepath.Join(dir, "data", "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop := filepath.Base(strings.TrimSpace(string(out)))

	if err := RemoveData(dir); err != nil {
		t.Fatal(err)
	}
	if left, _ := mountsBelow(dir); len(left) != 0 {
		t.Errorf("still mounted: %v", left)
	}
	if _, err := os.Stat(filepath.Join("/sys/block", loop, "loop", "backing_file")); err == nil {
		t.Errorf("%s is still attached to the removed image", loop)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the folder is still there: %v", err)
	}
}
