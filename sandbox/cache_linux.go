//go:build linux

package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"atelier/sandbox/injail"
)

// A project's cache is what its tools keep between builds (Go's build and
// module caches, npm's, pip's, ~/.cache in general), on a disk of its own:
// an image like a session's (disk_linux.go) that the project's sessions
// take in turn. Its size bounds what they may write into it, whatever
// they do, and TrimCache removes what was used least recently before the
// next session takes it, so that the next one has room to write.
//
// Every read moves an entry's access time (strictatime), so the access
// time is when the entry was last used; lazytime keeps those times in
// memory until the disk is unmounted, so a read costs no write.

// cacheMountFlags are the cache disk's mount flags.
const cacheMountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_STRICTATIME | unix.MS_LAZYTIME

// cacheDepth bounds how deep the server walks a cache, deeper than any
// tool's layout (a Go module's extracted source included).
const cacheDepth = 64

// cacheEnv points the usual tools' caches into HOME/.cache, where the
// project's cache is mounted (Spec.Cache): by default Go keeps its
// modules in ~/go/pkg/mod and npm its packages in ~/.npm, outside it.
func cacheEnv() []string {
	return []string{
		"XDG_CACHE_HOME=" + injail.Cache,
		"GOCACHE=" + injail.Cache + "/go-build",
		"GOMODCACHE=" + injail.Cache + "/go-mod",
		"npm_config_cache=" + injail.Cache + "/npm",
		"PIP_CACHE_DIR=" + injail.Cache + "/pip",
	}
}

// MountCache mounts the cache disk in image at target, making image (size
// bytes, sparse) when it is missing; a target that already is a mount
// point is left as it is. The file system's root is root's, mode 0711.
//
// An image whose file system still lives, in the mount namespace of a
// helper started while it was mounted, say, is mounted from the loop
// device that holds it: two devices over one image would be two file
// systems writing the same blocks.
func MountCache(image, target string, size int64) error {
	if mounted, err := mountTarget(image, target); err != nil || mounted {
		return err
	}
	if dev := loopOf(image); dev != "" {
		if err := unix.Mount(dev, target, "ext4", cacheMountFlags, "noinit_itable,discard"); err != nil {
			return fmt.Errorf("%w: mount %s at %s: %w", ErrDisk, dev, target, err)
		}
		return nil
	}
	made, err := makeImage(image, size)
	if err != nil {
		return err
	}
	if err := mountImage(image, target, cacheMountFlags); err != nil {
		if made {
			os.Remove(image)
		}
		return err
	}
	os.Remove(filepath.Join(target, "lost+found"))
	if err := os.Chmod(target, 0o711); err != nil {
		return fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return nil
}

// UnmountCache unmounts the cache disk at target and removes the folder,
// keeping the image for the next MountCache. A busy disk is detached: it
// goes when the last process holding it does.
func UnmountCache(target string) error {
	if mounted, err := isMountPoint(target); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	} else if mounted {
		if err := unix.Unmount(target, 0); err != nil {
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("%w: unmount %s: %w", ErrDisk, target, err)
			}
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return nil
}

// CleanCaches unmounts every cache disk whose image lies in dir, as a
// server that ended abruptly leaves them, and removes those images: their
// file systems, without a journal, may be half written. Images a clean
// stop unmounted stay. Call it at start, before any session runs.
func CleanCaches(dir string) error {
	attached, err := detachLoops(dir)
	for _, img := range attached {
		if rerr := os.Remove(img); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("%w: %w", ErrDisk, rerr))
		}
	}
	return err
}

// loopOf is the loop device attached to image, or "".
func loopOf(image string) string {
	loops, _ := filepath.Glob("/sys/block/loop*")
	for _, l := range loops {
		b, err := os.ReadFile(filepath.Join(l, "loop", "backing_file"))
		if err == nil && strings.TrimSpace(string(b)) == image {
			return "/dev/" + filepath.Base(l)
		}
	}
	return ""
}

// GiveCache hands the cache at dir to uid and gid: dir and everything
// below it becomes theirs, so the session that takes the cache may write
// where the one before wrote. Nothing is followed through a link. A folder
// deeper than any tool's layout is removed rather than handed on half.
// Nothing may run in the cache meanwhile.
//
// A cache whose folder is theirs already is theirs throughout: all that
// was written in it since it was last handed over was written by them.
func GiveCache(dir string, uid, gid uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == uid && st.Gid == gid {
		return nil
	}
	if err := PrepareDir(dir, uid, gid); err != nil {
		return err
	}
	return WalkTree(dir, WalkOptions{MaxDepth: cacheDepth}, func(e *TreeEntry) error {
		if e.TooDeep {
			if err := RemoveTreeAt(e.parent, e.Name); err != nil {
				return err
			}
			return fs.SkipDir
		}
		err := unix.Fchownat(e.parent, e.Name, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("sandbox: cache %s: %w", e.Path, err)
		}
		return nil
	})
}

// TrimCache removes the least recently used entries of the cache at dir
// until its disk holds at most keep bytes, and answers how many bytes the
// entries it removed held. An entry is a file (or a link, or anything but
// a folder), except that a folder its tool made read-only (Go's module
// cache makes each module's source so) goes or stays whole: half a module
// would break a build that no download can mend without the network. An
// entry's last use is the later of its access and modification times,
// a read-only folder's the latest of everything in it (a folder's access
// time aside, which listing it moves). A folder deeper
// than any tool's layout goes first. Nothing may run in the cache
// meanwhile.
func TrimCache(dir string, keep int64) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("sandbox: cache %s: %w", dir, err)
	}
	used := int64(st.Blocks-st.Bfree) * st.Bsize
	if used <= keep {
		return 0, nil
	}
	type unit struct {
		path string
		used int64 // nanoseconds since the epoch
		size int64 // bytes allocated
	}
	var units []unit
	var whole *unit // the read-only folder being summed up, if any
	err := WalkTree(dir, WalkOptions{MaxDepth: cacheDepth}, func(e *TreeEntry) error {
		if whole != nil && !strings.HasPrefix(e.Path, whole.path+"/") {
			units = append(units, *whole)
			whole = nil
		}
		if e.TooDeep {
			if whole == nil {
				units = append(units, unit{path: e.Path})
			}
			return nil
		}
		fi, err := e.Stat()
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		// A folder's access time moves when anybody lists it, this walk
		// included: its files tell when it was used.
		last := fi.Mtim.Nano()
		if e.Kind != KindDir {
			last = max(last, fi.Atim.Nano())
		}
		size := fi.Blocks * 512
		switch {
		case whole != nil:
			whole.used, whole.size = max(whole.used, last), whole.size+size
		case e.Kind == KindDir && fi.Mode&0o222 == 0:
			whole = &unit{path: e.Path, used: last, size: size}
		case e.Kind != KindDir:
			units = append(units, unit{path: e.Path, used: last, size: size})
		}
		return nil
	})
	if whole != nil {
		units = append(units, *whole)
	}
	if err != nil {
		return 0, err
	}
	slices.SortFunc(units, func(a, b unit) int {
		return cmp.Or(cmp.Compare(a.used, b.used), strings.Compare(a.path, b.path))
	})
	gone := map[string]bool{}
	var freed int64
	for _, u := range units {
		if used-freed <= keep {
			break
		}
		gone[u.path] = true
		freed += u.size
	}
	err = WalkTree(dir, WalkOptions{MaxDepth: cacheDepth}, func(e *TreeEntry) error {
		if !gone[e.Path] {
			return nil
		}
		if err := RemoveTreeAt(e.parent, e.Name); err != nil {
			return err
		}
		if e.Kind == KindDir {
			return fs.SkipDir
		}
		return nil
	})
	return freed, err
}
