//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A session's disk is a sparse file holding an ext4 file system, attached
// to a loop device and mounted where the session's folders live. Writes
// past its size fail with ENOSPC inside it, and the host gives it at most
// its size, whatever file system (ext4, xfs, ...) holds the file: no quota
// support of the host is needed.
//
// What the session deletes goes back to the host at once: the disk is
// mounted with discard, and a loop device answers a discard by punching a
// hole of that range in its file. Without a journal, ext4 discards each
// extent as it frees it rather than at a later commit, so the file holds
// what the session's files use plus the file system's own metadata, never
// the blocks of files gone. A periodic FITRIM (what fstrim does) was the
// other way: it needs a pass over every mounted disk on a timer, and until
// the pass a session that writes and deletes in a loop keeps its image at
// its full size, so the slack would be bounded by time, not by bytes. A
// discard here costs the host's file system a hole punch, not a device's
// TRIM. Where the host's file system cannot punch holes, the mount still
// succeeds and freed blocks stay in the image, as they did before.

// MountDisk mounts the file system in image at target, making image (size
// bytes, sparse) when it is missing. A target that already is a mount
// point is left as it is. The file system's root is root's, mode 0711:
// the caller makes the session's folders in it. Nothing on the disk is
// setuid or a device to the kernel.
func MountDisk(image, target string, size int64) error {
	if mounted, err := mountTarget(image, target); err != nil || mounted {
		return err
	}
	made, err := makeImage(image, size)
	if err != nil {
		return err
	}
	if err := mountImage(image, target, unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		if made {
			os.Remove(image) // a half-made image is made again next time
		}
		return err
	}
	// The file system's own folder for fsck's finds is of no use to a
	// disk that lives as long as its session.
	os.Remove(filepath.Join(target, "lost+found"))
	if err := os.Chmod(target, 0o711); err != nil {
		return fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return nil
}

// UnmountDisk unmounts target, then removes it (once empty) and image; the
// loop device goes with the mount. Nothing of the session may run.
func UnmountDisk(image, target string) error {
	var errs []error
	if mounted, err := isMountPoint(target); err == nil && mounted {
		if err := unix.Unmount(target, 0); err != nil {
			// Busy: a process not yet reaped holds a file. Detached, the
			// file system goes when the last of them does.
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("%w: unmount %s: %w", ErrDisk, target, err))
			}
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%w: %w", ErrDisk, err))
		}
	}
	if err := os.Remove(image); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("%w: %w", ErrDisk, err))
	}
	return errors.Join(errs...)
}

// CleanDisks unmounts every session disk whose image lies in dir, as a
// server that ended abruptly leaves them, and removes the images. Call it
// at start, before any session of dir's server runs.
func CleanDisks(dir string) error {
	_, err := detachLoops(dir)
	errs := []error{err}
	images, _ := filepath.Glob(filepath.Join(filepath.Clean(dir), "*.img"))
	for _, img := range images {
		if err := os.Remove(img); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrDisk, err))
		}
	}
	return errors.Join(errs...)
}

// detachLoops unmounts, wherever this mount namespace has them, the loop
// devices whose image lies in dir, and detaches them; it answers those
// images.
func detachLoops(dir string) (images []string, err error) {
	dir = filepath.Clean(dir)
	return detachLoopsOf(func(image string) bool { return filepath.Dir(image) == dir })
}

// ReleaseBelow unmounts everything mounted below dir (deepest first, each
// detached, so a file still open below does not hold it) and detaches the
// loop devices whose image lies below it: what a server leaves mounted
// in a data folder it will not start on again, since a stopping server
// keeps its sessions' checkouts and disks for its next start.
func ReleaseBelow(dir string) error {
	dir = filepath.Clean(dir)
	below := func(p string) bool { return strings.HasPrefix(p, dir+"/") }
	points, err := mountsWhere(below)
	errs := []error{err}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			errs = append(errs, fmt.Errorf("sandbox: unmount %s: %w", p, err))
		}
	}
	_, err = detachLoopsOf(below)
	return errors.Join(append(errs, err)...)
}

// detachLoopsOf unmounts and detaches the loop devices whose image
// (deleted or not) the predicate picks, and answers those images.
func detachLoopsOf(picked func(image string) bool) (images []string, err error) {
	loops, _ := filepath.Glob("/sys/block/loop*")
	var errs []error
	for _, l := range loops {
		b, err := os.ReadFile(filepath.Join(l, "loop", "backing_file"))
		if err != nil {
			continue // not attached
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if !picked(backing) {
			continue
		}
		images = append(images, backing)
		dev, err := os.ReadFile(filepath.Join(l, "dev"))
		if err != nil {
			continue
		}
		targets, err := mountsOfDevice(strings.TrimSpace(string(dev)))
		if err != nil {
			errs = append(errs, err)
		}
		for _, t := range targets {
			if err := unix.Unmount(t, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
				errs = append(errs, fmt.Errorf("%w: unmount %s: %w", ErrDisk, t, err))
			}
		}
		// A device attached but never mounted has no mount to clear it.
		if f, err := os.OpenFile("/dev/"+filepath.Base(l), os.O_RDWR, 0); err == nil {
			unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			f.Close()
		}
	}
	return images, errors.Join(errs...)
}

// makeImage makes image as a sparse file of size bytes holding an empty
// ext4 file system, unless it exists; made says whether it did.
func makeImage(image string, size int64) (made bool, err error) {
	if size < MinDiskBytes {
		return false, fmt.Errorf("%w: %d bytes is below the smallest disk, %d", ErrBadSpec, size, MinDiskBytes)
	}
	f, err := os.OpenFile(image, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrDisk, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// No journal: the disk does not outlive a crash of its server, so
		// it needs no recovery, and the journal's space stays the
		// session's. No reserved blocks: the session may fill all of it.
		var out []byte
		out, err = exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
			"-E", "root_owner=0:0,nodiscard,lazy_itable_init=1", image).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		os.Remove(image)
		return false, fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return true, nil
}

// mountImage attaches image to a free loop device that frees itself when
// unmounted, and mounts it at target with flags.
func mountImage(image, target string, flags uintptr) error {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDisk, err)
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDisk, err)
	}
	defer ctl.Close()
	// Another process may take the free device between asking and
	// attaching; then ask again.
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("%w: loop-control: %w", ErrDisk, err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrDisk, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], image)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == unix.EBUSY && try < 10 {
			loop.Close()
			time.Sleep(time.Duration(try+1) * time.Millisecond)
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("%w: attach %s: %w", ErrDisk, dev, err)
		}
		// noinit_itable: the kernel would otherwise zero the inode tables
		// in the background, writing blocks the sparse file does not need.
		// discard: freed blocks leave the image at once (see above).
		err = unix.Mount(dev, target, "ext4", flags, "noinit_itable,discard")
		// Mounted, the device stays attached until the unmount; not
		// mounted, closing it detaches it (autoclear).
		loop.Close()
		if err != nil {
			return fmt.Errorf("%w: mount %s at %s: %w", ErrDisk, dev, target, err)
		}
		return nil
	}
}

// isMountPoint reports whether path is the root of a mounted file system.
func isMountPoint(path string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, fmt.Errorf("%w: %w", ErrDisk, err)
	}
	if err := unix.Lstat(filepath.Dir(path), &parent); err != nil {
		return false, fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return st.Dev != parent.Dev || st.Ino == parent.Ino, nil
}

// mountsOfDevice lists where the device "major:minor" is mounted.
func mountsOfDevice(dev string) ([]string, error) {
	return mountsOf(func(device, _ string) bool { return device == dev })
}

// mountsWhere lists the mount points the predicate picks.
func mountsWhere(picked func(point string) bool) ([]string, error) {
	return mountsOf(func(_, point string) bool { return picked(point) })
}

// mountsOf lists the mount points of this mount namespace whose device
// ("major:minor") and point the predicate picks.
func mountsOf(picked func(device, point string) bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			if point := unescapeMount(fields[4]); picked(fields[2], point) {
				out = append(out, point)
			}
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes of spaces and the like.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountTarget checks a disk's image and mount point and makes the mount
// point (mode 0711, root's), answering whether a file system is mounted
// there already.
func mountTarget(image, target string) (mounted bool, err error) {
	if !cleanAbs(image) || !cleanAbs(target) {
		return false, fmt.Errorf("%w: %q and %q must be clean absolute paths", ErrBadSpec, image, target)
	}
	if isSymlink(target) {
		return false, fmt.Errorf("%w: %s", ErrSymlink, target)
	}
	if err := os.Mkdir(target, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return isMountPoint(target)
}
