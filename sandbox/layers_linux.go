//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

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
	if err := checkLayerPaths(lower, upper, work, target); err != nil {
		return err
	}
	fd, err := unix.Open(lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: overlay folder %s: %w", lower, err)
	}
	defer unix.Close(fd)
	return mountLayersOn(fd, upper, work, target)
}

// mountSharedLayers mounts at target the overlay of upper over the shared
// tree lower, root's, whose files the overlay shows as uid's: lower is
// mounted for it read-only through a user namespace that maps root to uid
// (an idmapped mount), so the session's user may write over any of them,
// into upper, while the tree itself stays root's and unwritten for the
// other sessions on it. errNoIdmap or ErrNoLayers when the host cannot.
func mountSharedLayers(lower string, uid uint32, upper, work, target string) error {
	if err := checkLayerPaths(lower, upper, work, target); err != nil {
		return err
	}
	userns, err := mapRootTo(uid)
	if err != nil {
		return err
	}
	defer unix.Close(userns)
	tree, err := unix.OpenTree(unix.AT_FDCWD, lower, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("sandbox: shared base %s: %w", lower, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("%w: %w", errNoIdmap, err)
		}
		return fmt.Errorf("sandbox: idmap the shared base: %w", err)
	}
	return mountLayersOn(tree, upper, work, target)
}

// mapRootTo returns a user namespace (its descriptor) that maps uid and
// gid 0 to uid, and nothing else. A namespace lives only while something
// holds it: a process is made in it, which waits on a pipe (cat) while
// its namespace is opened, and ends when the pipe closes.
func mapRootTo(uid uint32) (int, error) {
	cat, err := holderBinary()
	if err != nil {
		return -1, err
	}
	cmd := exec.Command(cat)
	cmd.Dir, cmd.Env = "/", []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: 1}}}
	hold, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		hold.Close()
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			return -1, fmt.Errorf("%w: a user namespace: %w", errNoIdmap, err)
		}
		return -1, fmt.Errorf("sandbox: a user namespace: %w", err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	hold.Close()
	if werr := cmd.Wait(); err == nil && werr != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sandbox: the user namespace's holder: %w", werr)
	}
	if err != nil {
		return -1, fmt.Errorf("sandbox: a user namespace: %w", err)
	}
	return fd, nil
}

// holderBinary is the program that holds a user namespace while it is
// opened: cat, reading a pipe until it closes.
var holderBinary = sync.OnceValues(func() (string, error) {
	for _, p := range []string{"/usr/bin/cat", "/bin/cat"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no cat to hold a user namespace", errNoIdmap)
})

// checkLayerPaths: the overlay's folders are clean absolute paths, none
// of them a link.
func checkLayerPaths(paths ...string) error {
	for _, p := range paths {
		if !cleanAbs(p) {
			return fmt.Errorf("%w: overlay folder %q must be a clean absolute path", ErrBadSpec, p)
		}
		if isSymlink(p) {
			return fmt.Errorf("%w: %s", ErrSymlink, p)
		}
	}
	return nil
}

// mountLayersOn mounts the overlay of upper over the folder lower (a
// descriptor) at target.
func mountLayersOn(lower int, upper, work, target string) error {
	// The overlay keeps its layers' names as it was given them and shows
	// them in the mount table, to the commands in the jail too
	// (/proc/self/mountinfo, statmount): named by descriptor, they say
	// nothing of where the session's folders are on the host. (Passed by
	// descriptor through fsconfig instead, they would show as full paths.)
	var opts strings.Builder
	fmt.Fprintf(&opts, "lowerdir=/proc/self/fd/%d,", lower)
	for _, l := range []struct{ key, path string }{{"upperdir", upper}, {"workdir", work}} {
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
