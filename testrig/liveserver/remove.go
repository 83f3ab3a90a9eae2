package liveserver

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// RemoveData removes a stopped server's folder and what its server left
// mounted below it. A server keeps its sessions' checkouts and disks
// mounted when it stops, for its next start to find (and clean up); a
// server that never starts again would leave them, and the loop devices
// under its disks, on the machine for good.
func RemoveData(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var errs []error
	points, err := mountsBelow(dir)
	if err != nil {
		errs = append(errs, err)
	}
	// Deepest first, each detached: a file still open below it (a
	// process not yet reaped) does not keep the folder from going.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("liveserver: unmount %s: %w", p, err))
		}
	}
	errs = append(errs, detachLoopsBelow(dir), os.RemoveAll(dir))
	return errors.Join(errs...)
}

// mountsBelow lists the mount points below dir in this mount namespace.
func mountsBelow(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no /proc: nothing the server mounted is known
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	return points, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// detachLoopsBelow detaches the loop devices whose backing file lies below
// dir (a session's disk image, deleted or not).
func detachLoopsBelow(dir string) error {
	loops, _ := filepath.Glob("/sys/block/loop*")
	var errs []error
	for _, l := range loops {
		b, err := os.ReadFile(filepath.Join(l, "loop", "backing_file"))
		if err != nil {
			continue // not attached
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if !strings.HasPrefix(backing, dir+"/") {
			continue
		}
		dev, err := os.OpenFile(filepath.Join("/dev", filepath.Base(l)), os.O_RDONLY, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("liveserver: loop device: %w", err))
			continue
		}
		if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
			errs = append(errs, fmt.Errorf("liveserver: detach %s: %w", dev.Name(), err))
		}
		dev.Close()
	}
	return errors.Join(errs...)
}
