//go:build linux

package injail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// More of the jail's inside, which only the helper needs.
const (
	jailUser     = "atelier"
	jailHostname = "atelier"
	// jailShmBytes is the size of the command's private /dev/shm.
	jailShmBytes = 64 << 20
	// jailTmpBytes bounds /tmp when the session has no folder for it.
	jailTmpBytes = 256 << 20
)

// jailDevices are bound from the host's /dev; nothing else of it is inside.
var jailDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// source is a host path opened before the new root hides the host: binds
// then go through /proc/self/fd, to exactly what was opened.
type source struct {
	fd   int
	link string // the target when the path is a symbolic link (/bin -> usr/bin)
	dir  bool
}

func openSource(path string, follow bool) (*source, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode()&fs.ModeSymlink != 0 && !follow {
		target, err := os.Readlink(path)
		if err != nil {
			return nil, err
		}
		return &source{fd: -1, link: target}, nil
	}
	flags := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &source{fd: fd, dir: fst.Mode&unix.S_IFMT == unix.S_IFDIR}, nil
}

func (s *source) path() string { return "/proc/self/fd/" + strconv.Itoa(s.fd) }

func (s *source) close() {
	if s.fd >= 0 {
		unix.Close(s.fd)
	}
}

// buildJail gives this process (PID 1 of fresh mount, PID, IPC and UTS
// namespaces, still root) its new root: the host's system folders
// read-only, the checkout at /workspace, the session's /tmp and HOME, a
// minimal /dev, a private /dev/shm and /proc of the PID namespace. The
// host's root is detached; nothing else of it stays reachable.
func buildJail(is *Spec) error {
	// Nothing mounted here may reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	type bind struct {
		src    *source
		target string // inside the new root
		rw     bool
	}
	var binds []bind
	defer func() {
		for _, b := range binds {
			b.src.close()
		}
	}()
	for _, p := range is.ROPaths {
		src, err := openSource(p, false)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		binds = append(binds, bind{src: src, target: p})
	}
	for _, d := range []struct {
		host, target string
	}{{is.Workspace, Workspace}, {is.Home, Home}, {is.Tmp, "/tmp"}} {
		if d.host == "" {
			continue
		}
		src, err := openFolderSource(d.host)
		if err != nil {
			return err
		}
		binds = append(binds, bind{src: src, target: d.target, rw: true})
	}
	for _, dev := range jailDevices {
		src, err := openSource("/dev/"+dev, true)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		binds = append(binds, bind{src: src, target: "/dev/" + dev, rw: true})
	}

	var cache *source
	if is.Cache != "" {
		src, err := openFolderSource(is.Cache)
		if err != nil {
			return err
		}
		cache = src
		defer cache.close()
	}

	if is.TTY {
		if src := terminalSource(); src != nil {
			binds = append(binds, bind{src: src, target: "/dev/console", rw: true})
		}
	}

	// The new root is a tmpfs mounted over /tmp of this namespace: every
	// source is already open, so what it hides does not matter.
	root := "/tmp"
	if err := unix.Mount("atelier", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mount the new root: %w", err)
	}
	for _, b := range binds {
		target := filepath.Join(root, b.target)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if b.src.link != "" {
			if err := os.Symlink(b.src.link, target); err != nil {
				return err
			}
			continue
		}
		if b.src.dir {
			if err := os.Mkdir(target, 0o755); err != nil {
				return err
			}
		} else if err := os.WriteFile(target, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Mount(b.src.path(), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b.target, err)
		}
		var flags uint64 = unix.MOUNT_ATTR_NOSUID
		if b.src.dir {
			flags |= unix.MOUNT_ATTR_NODEV
		}
		if !b.rw {
			flags |= unix.MOUNT_ATTR_RDONLY
		}
		if err := setMountAttr(target, flags); err != nil {
			return fmt.Errorf("restrict %s: %w", b.target, err)
		}
	}
	if cache != nil {
		if err := mountCache(root, cache); err != nil {
			return err
		}
	}
	if is.Tmp == "" {
		if err := mountTmpfs(root, "/tmp", 0o1777, jailTmpBytes); err != nil {
			return err
		}
	}
	if err := mountTmpfs(root, "/dev/shm", 0o1777, jailShmBytes); err != nil {
		return err
	}
	if err := os.MkdirAll(root+"/dev/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", root+"/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount a private devpts: %w", err)
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, root+"/dev/"+name); err != nil {
			return err
		}
	}
	if err := os.Mkdir(root+"/proc", 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc of the PID namespace: %w", err)
	}
	if err := writeAccounts(root, is); err != nil {
		return err
	}

	// Enter the new root and drop the host's: pivot_root(".", ".") stacks
	// the old root on the new one, and the detach takes it away.
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the new root read-only: %w", err)
	}
	return unix.Sethostname([]byte(jailHostname))
}

// openFolderSource opens one of the session's folders, or the project's
// cache: root's choice of path, where a link is refused rather than
// followed.
func openFolderSource(path string) (*source, error) {
	src, err := openSource(path, false)
	if err == nil && (src.fd < 0 || !src.dir) {
		src.close()
		err = fmt.Errorf("%s is a link or not a folder", path)
	}
	return src, err
}

// mountCache binds the project's cache at HOME/.cache, over the folder of
// that name in the session's HOME, once HOME is bound. That folder is the
// session's to replace, by a link to anywhere, say: it is made and opened
// without following a link, and the cache is bound onto what was opened.
// A session that made it something else than a folder goes without the
// cache, with whatever it put there. The cache is nosuid and nodev inside.
func mountCache(root string, cache *source) error {
	home, err := unix.Open(root+Home, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", Home, err)
	}
	defer unix.Close(home)
	name := filepath.Base(Cache)
	if err := unix.Mkdirat(home, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("make %s: %w", Cache, err)
	}
	target, err := unix.Openat(home, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil // a link (O_PATH opens one for itself) or a file
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", Cache, err)
	}
	defer unix.Close(target)
	// A bind made apart, restricted, then moved onto the folder: the
	// folder's /proc/self/fd name leads to the folder, not to what is
	// mounted on it once it is.
	tree, err := unix.OpenTree(cache.fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) { // before Linux 5.2: the bind keeps the disk's flags
		if err := unix.Mount(cache.path(), "/proc/self/fd/"+strconv.Itoa(target), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", Cache, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("bind %s: %w", Cache, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("restrict %s: %w", Cache, err)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind %s: %w", Cache, err)
	}
	return nil
}

// terminalSource is the shell's terminal (stdin), to be seen as
// /dev/console: it lives on the host's devpts, which is not inside, and
// without a name ttyname(3) and tty(1) fail. It is opened by its path in
// this namespace's copy of the host's mounts (a bind from the server's
// own mount is refused) and must be the very terminal on stdin. nil when
// it cannot be found: the shell works without the name.
func terminalSource() *source {
	name, err := os.Readlink("/proc/self/fd/0")
	if err != nil || !strings.HasPrefix(name, "/dev/") {
		return nil
	}
	src, err := openSource(name, false)
	if err != nil {
		return nil
	}
	var in, named unix.Stat_t
	if src.fd < 0 || unix.Fstat(0, &in) != nil || unix.Fstat(src.fd, &named) != nil ||
		in.Mode&unix.S_IFMT != unix.S_IFCHR || named.Mode&unix.S_IFMT != unix.S_IFCHR || in.Rdev != named.Rdev {
		src.close()
		return nil
	}
	return src
}

// setMountAttr applies flags to the mount at target and every mount below
// it (a host's /etc often has /etc/hosts bound on its own).
func setMountAttr(target string, flags uint64) error {
	attr := unix.MountAttr{Attr_set: flags}
	err := unix.MountSetattr(unix.AT_FDCWD, target, unix.AT_RECURSIVE, &attr)
	if err != unix.ENOSYS {
		return err
	}
	// Before Linux 5.12: the top mount only.
	ms := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID)
	if flags&unix.MOUNT_ATTR_NODEV != 0 {
		ms |= unix.MS_NODEV
	}
	if flags&unix.MOUNT_ATTR_RDONLY != 0 {
		ms |= unix.MS_RDONLY
	}
	return unix.Mount("", target, "", ms, "")
}

func mountTmpfs(root, target string, mode os.FileMode, size int64) error {
	if err := os.MkdirAll(root+target, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=%o,size=%d", mode, size)
	if err := unix.Mount("tmpfs", root+target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	return nil
}

// writeAccounts binds generated passwd and group files over the host's, so
// the session's uid has a name, a home and a shell inside; and places the
// command's resolv.conf (resolv_linux.go) at /etc/resolv.conf and where the
// host's link leads.
func writeAccounts(root string, is *Spec) error {
	uid, gid := strconv.FormatUint(uint64(is.UID), 10), strconv.FormatUint(uint64(is.GID), 10)
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			jailUser + ":x:" + uid + ":" + gid + "::" + Home + ":/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group": "root:x:0:\n" + jailUser + ":x:" + gid + ":\n" + "nogroup:x:65534:\n",
	}
	for name, content := range files {
		if _, err := placeInJail(root, "/etc/"+name, content, false); err != nil {
			return err
		}
	}
	if is.ResolvConf == "" {
		return nil // the probe
	}
	at, err := placeInJail(root, HostResolvConf, is.ResolvConf, true)
	if err != nil || is.ResolvAt == "" {
		return err
	}
	if other, err := resolveInJail(root, is.ResolvAt); err != nil || other == at {
		return nil
	}
	_, err = placeInJail(root, is.ResolvAt, is.ResolvConf, true)
	return err
}
