//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
// the upper folder alone says what each path now is (see ReadUpper).
func MountLayers(lower, upper, work, target string) error {
	for _, p := range []string{lower, upper, work, target} {
		if !cleanAbs(p) || strings.ContainsAny(p, ",:\\") {
			return fmt.Errorf("%w: overlay folder %q must be a clean absolute path without , : or \\", ErrBadSpec, p)
		}
		if isSymlink(p) {
			return fmt.Errorf("%w: %s", ErrSymlink, p)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work +
		",redirect_dir=off,metacopy=off,index=off"
	err := unix.Mount("atelier-checkout", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
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

// UpperEntry is one path the upper folder holds: a folder (Opaque when it
// replaced the base's folder of that name wholesale), a deletion mark
// (Whiteout), or anything else written there.
type UpperEntry struct {
	Path     string // slash-separated, relative to the checkout
	Dir      bool
	Opaque   bool
	Whiteout bool
}

// ReadUpper lists every path of upper, parents before their children,
// reading nothing but folders and never following a link. Names are as
// the file system has them; the caller judges them.
func ReadUpper(upper string) ([]UpperEntry, error) {
	root, err := os.OpenRoot(upper)
	if err != nil {
		return nil, fmt.Errorf("sandbox: checkout's upper folder: %w", err)
	}
	defer root.Close()
	var out []UpperEntry
	var walk func(rel string) error
	walk = func(rel string) error {
		name := rel
		if name == "" {
			name = "."
		}
		d, err := root.Open(name)
		if err != nil {
			return err
		}
		defer d.Close()
		entries, err := d.ReadDir(-1)
		if err != nil {
			return err
		}
		fd := int(d.Fd())
		var dirs []string
		for _, e := range entries {
			p := e.Name()
			if rel != "" {
				p = rel + "/" + p
			}
			ue := UpperEntry{Path: p}
			switch t := e.Type(); {
			case t.IsDir():
				ue.Dir = true
				if ue.Opaque, err = opaque(fd, e.Name()); err != nil {
					return err
				}
				dirs = append(dirs, p)
			case t&fs.ModeCharDevice != 0:
				var st unix.Stat_t
				if err := unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return err
				}
				ue.Whiteout = st.Rdev == 0
			}
			out = append(out, ue)
		}
		for _, p := range dirs {
			if err := walk(p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, fmt.Errorf("sandbox: read the checkout's upper folder: %w", err)
	}
	return out, nil
}

// opaque reports the overlay's mark on a folder of the upper layer that
// hides everything of the lower one below it.
// A mark it cannot read is an error: taken for absent, it would hide
// deletions.
func opaque(dirfd int, name string) (bool, error) {
	f, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(f)
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(f, "trusted.overlay.opaque", buf)
	switch {
	case errors.Is(err, unix.ENODATA):
		return false, nil
	case err != nil:
		return false, err
	}
	return n == 1 && buf[0] == 'y', nil
}
