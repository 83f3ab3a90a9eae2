//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// A session's checkout is an overlay: the base tree as exported once (the
// lower layer, which nobody writes through), and an upper folder that
// receives every file a command, a shell or the editor writes, and a mark
// for every file they delete. What changed is then what the upper folder
// holds, however large the base: the capture after a command lists the
// upper folder instead of the whole checkout.

// ErrNoLayers: the host cannot mount an overlay here (no overlay file
// system, or an upper folder on a file system it refuses, such as another
// overlay); the caller falls back to a plain folder.
var ErrNoLayers = errors.New("sandbox: no overlay for the checkout")

// MountLayers mounts at target the overlay of upper over lower, with work
// as the overlay's scratch folder on upper's file system. upper and work
// must be empty folders the first time. Renamed folders are copied rather
// than redirected, and a file's metadata change copies the whole file, so
// the upper folder alone says what each path now is (see WalkTree).
func MountLayers(lower, upper, work, target string) error {
	for _, p := range []string{lower, upper, work, target} {
		if !cleanAbs(p) {
			return fmt.Errorf("%w: overlay folder %q must be a clean absolute path", ErrBadSpec, p)
		}
		if isSymlink(p) {
			return fmt.Errorf("%w: %s", ErrSymlink, p)
		}
	}
	// The overlay keeps its layers' names as it was given them and shows
	// them in the mount table, to the commands in the jail too
	// (/proc/self/mountinfo, statmount): named by descriptor, they say
	// nothing of where the session's folders are on the host. (Passed by
	// descriptor through fsconfig instead, they would show as full paths.)
	var opts strings.Builder
	for _, l := range []struct{ key, path string }{{"lowerdir", lower}, {"upperdir", upper}, {"workdir", work}} {
		fd, err := unix.Open(l.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sandbox: overlay folder %s: %w", l.path, err)
		}
		defer unix.Close(fd)
		fmt.Fprintf(&opts, "%s=/proc/self/fd/%d,", l.key, fd)
	}
	opts.WriteString("redirect_dir=off,metacopy=off,index=off")
	err := unix.Mount("atelier-checkout", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts.String())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENODEV), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %w", ErrNoLayers, err)
	}
	return fmt.Errorf("sandbox: mount the checkout's overlay: %w", err)
}

// UnmountLayers unmounts the overlay at target, if one is mounted there
// (a leftover of a server that stopped is too). A busy mount is detached:
// it goes when the last process holding a file of it does.
func UnmountLayers(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("sandbox: checkout %s: %w", target, err)
	}
	if st.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return nil
	}
	if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err == nil || errors.Is(err, unix.EINVAL) {
		return nil
	}
	if err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("sandbox: unmount the checkout %s: %w", target, err)
	}
	return nil
}
