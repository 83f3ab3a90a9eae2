//go:build linux

package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The server walks trees that sandboxed code wrote: a checkout after a
// command, and every folder of a session when it is removed. Such a tree
// can be thousands of folders deep, hold a hundred thousand entries, or
// change while it is read. A walk that keeps a descriptor per level, or
// resolves each path from the top again, costs descriptors and time the
// tree's author chooses. Here every folder is opened relative to its
// parent's descriptor, never through a link, and a walk holds at most one
// descriptor per level down to a bound the caller sets.

// direntBuf is how much of a folder one getdents call reads.
const direntBuf = 8 << 10

// Stat reads the entry's metadata without following a link.
func (e *TreeEntry) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Fstatat(e.parent, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	return st, err
}

// fileStatOf is what a capture knows of st.
func fileStatOf(st *unix.Stat_t) FileStat {
	return FileStat{Regular: st.Mode&unix.S_IFMT == unix.S_IFREG, Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size,
		Mode: st.Mode, MtimeNsec: st.Mtim.Nano(), CtimeNsec: st.Ctim.Nano()}
}

// statFile is what a capture knows of an open file.
func statFile(f *os.File) (FileStat, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return FileStat{}, err
	}
	return fileStatOf(&st), nil
}

// Open opens the entry for reading without following a link and without
// blocking on a pipe: whoever wrote the tree may have swapped it since.
func (e *TreeEntry) Open() (*os.File, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(e.parent, e.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: e.Path, Err: err}
	}
	return os.NewFile(uintptr(fd), e.Path), nil
}

// Readlink reads the target of a link entry.
func (e *TreeEntry) Readlink() (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(e.parent, e.Name, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlinkat", Path: e.Path, Err: err}
	}
	return string(buf[:n]), nil
}

// folderReader reads one open folder's entries a buffer at a time, so a
// folder of a hundred thousand names costs one buffer, not a list.
type folderReader struct {
	fd       int
	path     string
	depth    int
	buf      []byte
	pos, end int
}

func (f *folderReader) next() (name string, typ uint8, ok bool, err error) {
	for {
		if f.pos >= f.end {
			var n int
			err := ignoringEINTR(func() (err error) { n, err = unix.Getdents(f.fd, f.buf); return err })
			if err != nil {
				return "", 0, false, &fs.PathError{Op: "getdents", Path: f.path, Err: err}
			}
			if n <= 0 {
				return "", 0, false, nil
			}
			f.pos, f.end = 0, n
		}
		// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
		rec := f.buf[f.pos:f.end]
		if len(rec) < 19 {
			return "", 0, false, fmt.Errorf("sandbox: short directory entry in %s", f.path)
		}
		reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
		if reclen < 19 || reclen > len(rec) {
			return "", 0, false, fmt.Errorf("sandbox: bad directory entry in %s", f.path)
		}
		f.pos += reclen
		raw := rec[19:reclen]
		for i, c := range raw {
			if c == 0 {
				raw = raw[:i]
				break
			}
		}
		if name := string(raw); name != "." && name != ".." {
			return name, rec[18], true, nil
		}
	}
}

// buffers hands out getdents buffers and takes them back, so a walk
// allocates one for each level it is at, not one for each folder it meets.
type buffers [][]byte

func (b *buffers) get() []byte {
	if n := len(*b); n > 0 {
		buf := (*b)[n-1]
		*b = (*b)[:n-1]
		return buf
	}
	return make([]byte, direntBuf)
}

func (b *buffers) put(buf []byte) { *b = append(*b, buf) }

// WalkTree calls visit for every entry below dir, each folder before what
// it holds, never following a link. visit may answer fs.SkipDir for a
// folder to leave it unentered, or fs.SkipAll to end the walk. An entry
// that goes away between being listed and being entered is passed over.
// dir itself must not be a link.
func WalkTree(dir string, opt WalkOptions, visit func(*TreeEntry) error) error {
	top, err := openFolder(unix.AT_FDCWD, dir)
	if err != nil {
		return fmt.Errorf("sandbox: walk %s: %w", dir, err)
	}
	var free buffers
	stack := []*folderReader{{fd: top, buf: free.get()}}
	defer func() {
		for _, f := range stack {
			unix.Close(f.fd)
		}
	}()
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		name, typ, ok, err := f.next()
		if err != nil {
			return err
		}
		if !ok {
			unix.Close(f.fd)
			free.put(f.buf)
			stack = stack[:len(stack)-1]
			continue
		}
		e := TreeEntry{Path: joinRel(f.path, name), Name: name, Depth: f.depth + 1, parent: f.fd}
		if typ == unix.DT_UNKNOWN {
			st, err := e.Stat()
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return err
			}
			typ = direntType(st.Mode)
		}
		child := -1
		switch typ {
		case unix.DT_DIR:
			e.Kind = KindDir
			e.TooDeep = e.Depth >= opt.MaxDepth
			if !e.TooDeep || opt.Upper {
				// Opened before the visit: the opaque mark is read through
				// the folder's own descriptor, and the same folder is walked.
				if child, err = openFolder(f.fd, name); err != nil {
					if gone(err) {
						continue
					}
					return fmt.Errorf("sandbox: walk %s: %w", e.Path, err)
				}
				if opt.Upper {
					if e.Opaque, err = opaqueFolder(child); err != nil {
						unix.Close(child)
						return fmt.Errorf("sandbox: walk %s: %w", e.Path, err)
					}
				}
				if e.TooDeep {
					unix.Close(child)
					child = -1
				}
			}
		case unix.DT_REG:
			e.Kind = KindFile
		case unix.DT_LNK:
			e.Kind = KindLink
		case unix.DT_CHR:
			if opt.Upper {
				st, err := e.Stat()
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				if err != nil {
					return err
				}
				if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
					e.Kind = KindWhiteout
				}
			}
		}
		err = visit(&e)
		if err == nil && child >= 0 {
			stack = append(stack, &folderReader{fd: child, path: e.Path, depth: e.Depth, buf: free.get()})
			continue
		}
		if child >= 0 {
			unix.Close(child)
		}
		switch {
		case err == nil, errors.Is(err, fs.SkipDir):
		case errors.Is(err, fs.SkipAll):
			return nil
		default:
			return err
		}
	}
	return nil
}

// RemoveTree removes dir and everything below it (see RemoveTreeAt). dir's
// own folders must be the server's: only what lies below it is opened
// relative to its parent. A missing dir is no error.
func RemoveTree(dir string) error {
	parent, err := openFolder(unix.AT_FDCWD, filepath.Dir(dir))
	if gone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: remove %s: %w", dir, err)
	}
	defer unix.Close(parent)
	return RemoveTreeAt(parent, filepath.Base(dir))
}

// RemoveTreeAt removes name in the folder open as parent, and everything
// below it when it is a folder, without following a link and holding a
// bounded number of descriptors however deep the tree is: a folder met
// removeDepth levels down is first moved up into name itself (under a name
// of its own), and removed from there. Every step is relative to an open
// folder, so a link planted on the way leads nowhere. A missing name is no
// error.
func RemoveTreeAt(parent int, name string) error {
	err := unix.Unlinkat(parent, name, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case !errors.Is(err, unix.EISDIR):
		return fmt.Errorf("sandbox: remove %s: %w", name, err)
	}
	top, err := openFolder(parent, name)
	if gone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: remove %s: %w", name, err)
	}
	err = emptyFolder(top, name)
	unix.Close(top)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("sandbox: remove %s: %w", name, err)
	}
	return nil
}

// removeDepth is how deep RemoveTree goes before it lifts a folder up.
const removeDepth = 32

// emptyFolder removes everything in the folder open as top.
func emptyFolder(top int, dir string) error {
	lifted := 0
	type level struct {
		*folderReader
		name    string // in the parent
		changed bool   // entries were removed or added since the start
	}
	var free buffers
	stack := []*level{{folderReader: &folderReader{fd: top, path: dir, buf: free.get()}}}
	defer func() {
		for i := len(stack) - 1; i > 0; i-- { // top is the caller's
			unix.Close(stack[i].fd)
		}
	}()
	for len(stack) > 0 {
		l := stack[len(stack)-1]
		name, typ, ok, err := l.next()
		if err != nil {
			return err
		}
		if !ok {
			if l.changed {
				// Read again from the start: a listing that changed under
				// the reader may have missed what was lifted into it.
				if _, err := unix.Seek(l.fd, 0, 0); err != nil {
					return fmt.Errorf("sandbox: remove %s: %w", l.path, err)
				}
				l.pos, l.end, l.changed = 0, 0, false
				continue
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return nil
			}
			unix.Close(l.fd)
			free.put(l.buf)
			parent := stack[len(stack)-1]
			if err := unix.Unlinkat(parent.fd, l.name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("sandbox: remove %s: %w", l.path, err)
			}
			parent.changed = true
			continue
		}
		l.changed = true
		if typ != unix.DT_DIR {
			err := unix.Unlinkat(l.fd, name, 0)
			if err == nil || errors.Is(err, unix.ENOENT) {
				continue
			}
			if !errors.Is(err, unix.EISDIR) { // EISDIR: a folder the listing did not type
				return fmt.Errorf("sandbox: remove %s/%s: %w", l.path, name, err)
			}
		}
		if len(stack) > removeDepth {
			for {
				lifted++
				err := unix.Renameat2(l.fd, name, top, ".atelier-removing-"+strconv.Itoa(lifted), unix.RENAME_NOREPLACE)
				if errors.Is(err, unix.EEXIST) {
					continue
				}
				if err != nil {
					return fmt.Errorf("sandbox: remove %s/%s: %w", l.path, name, err)
				}
				break
			}
			stack[0].changed = true
			continue
		}
		child, err := openFolder(l.fd, name)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) { // not a folder after all
			err = unix.Unlinkat(l.fd, name, 0)
			if err == nil {
				continue
			}
		}
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("sandbox: remove %s/%s: %w", l.path, name, err)
		}
		stack = append(stack, &level{folderReader: &folderReader{fd: child, path: l.path + "/" + name, buf: free.get()}, name: name})
	}
	return nil
}

// openFolder opens name under dirfd as a folder, never through a link.
func openFolder(dirfd int, name string) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		return err
	})
	return fd, err
}

// gone reports an entry that went away, or is no longer a folder, since
// it was listed.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)
}

// opaqueFolder reports the overlay's mark on an upper layer's folder that
// hides everything of the lower one below it. A mark it cannot read is an
// error: taken for absent, it would hide deletions.
func opaqueFolder(fd int) (bool, error) {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, "trusted.overlay.opaque", buf)
	switch {
	case errors.Is(err, unix.ENODATA):
		return false, nil
	case err != nil:
		return false, err
	}
	return n == 1 && buf[0] == 'y', nil
}

func direntType(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	case unix.S_IFCHR:
		return unix.DT_CHR
	}
	return dtOther
}

// dtOther types an entry that is none of the kinds the walk tells apart.
const dtOther = 0xff

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func ignoringEINTR(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
