package workspace

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"atelier/fault"
)

// FileKind is what an entry of a project's tree is, as the Code page shows it.
type FileKind string

const (
	KindFile    FileKind = "file"
	KindDir     FileKind = "dir"
	KindSymlink FileKind = "symlink"
	// KindOther is a device, FIFO or socket: listed, never opened.
	KindOther FileKind = "other"
)

// DirEntry describes one entry of a project's tree without following it.
type DirEntry struct {
	Name string
	Kind FileKind
	Size int64 // bytes of a file; 0 for every other kind
	// Target is a symlink's text, for display only: it is never resolved
	// here, and bytes that are not UTF-8 are replaced.
	Target string
}

var (
	// ErrNotRegular refuses to read a folder, device, FIFO or socket.
	ErrNotRegular = fault.New(fault.Unsupported, "not_regular_file", "workspace: not a regular file", "That is a device, a pipe or a socket, not a file.")
	// ErrOutsideRoot refuses a path that a symlink takes out of the
	// project's folder.
	ErrOutsideRoot = fault.New(fault.Forbidden, "outside_root", "workspace: path leads outside the project folder", "That path leads outside the project's folder.")
)

// LocalFS reads a Local project's folder live, for the Code page. Every
// access goes through an os.Root opened on the folder, so no path and no
// symlink reaches anything outside it. A relative symlink that stays inside
// is followed on reads; an absolute one is refused even when it names a
// place inside, because os.Root takes no absolute link text. Listings
// describe symlinks and never follow them. Like os.Root, a LocalFS does not
// stop at a mount point inside the folder: what is mounted there is read.
//
// It only reads. A LocalFS is safe for concurrent use.
type LocalFS struct {
	root *os.Root
	// real is the folder's path with symlinks resolved, as recorded, to
	// tell where an opened file really is.
	real string
	// escape is os.Root's own error for a path leaving the root; see
	// escapeError.
	escape error
}

// Path is the folder's path with every symlink resolved, as recorded at
// creation and just checked by OpenLocal, for the git calls that need a
// folder by name (gitsvc.OpenLocal, Remotes).
//
// A path and not the descriptor's /proc/self/fd/N: gitsvc resolves the
// folder it is given inside the server before git starts, and every later
// git call names the repository by the paths rev-parse printed, so the
// descriptor would bind only the first lookup and then turn back into this
// same path. What keeps the short window between the check and git's own
// lookup harmless is the ownership rule OpenLocal just checked: no session
// user owns or may rename anything from / down to this folder, so only
// root and the folder's owner could swap it meanwhile, and git in a Local
// folder runs with the owner's rights, so a swap shows the owner nothing
// they could not read already.
func (l *LocalFS) Path() string { return l.real }

// Close releases the folder. Files returned by Open stay usable.
func (l *LocalFS) Close() error {
	return l.root.Close()
}

// escapeError returns the value os.Root wraps when a path, or a symlink met
// on the way, would leave the root. The os package keeps it unexported
// (errPathEscapes, "path escapes from parent", in Go 1.24 to 1.26) and its
// text is no contract, so it is caught by identity instead: asking the root
// for ".." fails with it, inside an *os.PathError, before any system call
// is made. errors.Is against the caught value then recognises every later
// escape without reading a message. On Linux os.Root walks the path itself
// with openat and reports every escape (a ".." above the root, an absolute
// symlink, a relative one climbing out) with this one value.
//
// Should a future Go stop answering the probe this way, escapeError returns
// nil: escapes are still refused by os.Root, only no longer reported as
// ErrOutsideRoot, and TestEscapeProbe fails so the upgrade is noticed.
func escapeError(r *os.Root) error {
	_, err := r.Lstat("..")
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Err != nil {
		return pe.Err
	}
	return nil
}

// fail wraps an error from os.Root for the path p, adding ErrOutsideRoot
// to an escape and ErrNotRegular to ENXIO, which is what opening a socket
// (or a device without a driver) gives.
func (l *LocalFS) fail(op, p string, err error) error {
	switch {
	case l.escape != nil && errors.Is(err, l.escape):
		return fmt.Errorf("workspace: %s %q: %w: %w", op, p, ErrOutsideRoot, err)
	case errors.Is(err, unix.ENXIO):
		return fmt.Errorf("workspace: %s %q: %w: %w", op, p, ErrNotRegular, err)
	}
	return fmt.Errorf("workspace: %s %q: %w", op, p, err)
}

// ReadDir lists the folder dir ("" is the project's root): folders first,
// then everything else, each group by name. A symlink is listed as
// KindSymlink with its text and never followed, though dir itself may be
// reached through symlinks that stay inside the root. The .git folder is
// left out, and so is any entry CheckRelPath would refuse as a name (a
// spelling of .git, or bytes that are not UTF-8), so everything listed can
// be asked for again. Names CheckNewPath refuses (control characters,
// bidirectional overrides, only spaces) are listed: the folder's owner
// wrote them, and they can be read, though Atelier never writes one.
func (l *LocalFS) ReadDir(dir string) ([]DirEntry, error) {
	if err := CheckRelDir(dir); err != nil {
		return nil, err
	}
	name := dir
	if name == "" {
		name = "."
	}
	// O_DIRECTORY refuses a FIFO before it could block the open;
	// O_NONBLOCK is there in case some filesystem disagrees.
	f, err := l.root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, l.fail("list", dir, err)
	}
	defer f.Close()
	if err := l.checkLanding(dir, f); err != nil {
		return nil, err
	}
	list, err := readEntries(f)
	if err != nil {
		return nil, l.fail("list", dir, err)
	}
	slices.SortFunc(list, func(a, b DirEntry) int {
		if (a.Kind == KindDir) != (b.Kind == KindDir) {
			if a.Kind == KindDir {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return list, nil
}

// readEntries describes the entries of the open folder f. Each is looked
// at with fstatat and readlinkat relative to f's own descriptor rather than
// by path, so the listing is of the folder that was opened even if its path
// changes meanwhile, and nothing is followed. An entry removed between the
// listing and the look is skipped.
func readEntries(f *os.File) ([]DirEntry, error) {
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	list := make([]DirEntry, 0, len(names))
	var inner error
	err = rc.Control(func(fd uintptr) {
		for _, name := range names {
			if checkName(name) != "" || !utf8.ValidString(name) {
				continue
			}
			var st unix.Stat_t
			err := unix.Fstatat(int(fd), name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				inner = fmt.Errorf("stat %q: %w", name, err)
				return
			}
			// Stat_t.Mode is 16 bits wide on the BSDs.
			e := DirEntry{Name: name, Kind: kindOf(uint32(st.Mode))}
			switch e.Kind {
			case KindFile:
				e.Size = st.Size
			case KindSymlink:
				e.Target, err = readlinkAt(int(fd), name)
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				if err != nil {
					inner = fmt.Errorf("readlink %q: %w", name, err)
					return
				}
			}
			list = append(list, e)
		}
	})
	if err == nil {
		err = inner
	}
	return list, err
}

// Stat describes the entry at p without following it when it is a symlink
// (symlinks on the way to it are followed while they stay inside the root).
func (l *LocalFS) Stat(p string) (DirEntry, error) {
	if err := CheckRelPath(p); err != nil {
		return DirEntry{}, err
	}
	fi, err := l.root.Lstat(p)
	if err != nil {
		return DirEntry{}, l.fail("stat", p, err)
	}
	e := DirEntry{Name: path.Base(p), Kind: kindOfMode(fi.Mode())}
	switch e.Kind {
	case KindFile:
		e.Size = fi.Size()
	case KindSymlink:
		target, err := l.root.Readlink(p)
		if err != nil {
			return DirEntry{}, l.fail("stat", p, err)
		}
		e.Target = strings.ToValidUTF8(target, "\uFFFD")
	}
	return e, nil
}

// ReadFile reads the start of the regular file at p: at most limit bytes,
// nothing when limit <= 0. It returns them with the file's full size when it
// was opened, so the caller can tell it got only the start (len(data) <
// size); data never holds more than size bytes, even if the file grows
// meanwhile. It refuses with the errors Open does.
func (l *LocalFS) ReadFile(p string, limit int64) (data []byte, size int64, err error) {
	f, size, err := l.Open(p)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, min(limit, size)))
	if err != nil {
		return nil, 0, l.fail("read", p, err)
	}
	return data, size, nil
}

// Open opens the regular file at p for reading, for streaming a download,
// and returns it with its size; the caller closes it. Symlinks are followed
// while they stay inside the root. It refuses with an error wrapping
// ErrBadPath for a path CheckRelPath refuses, ErrOutsideRoot for one a
// symlink takes out of the root, ErrNotRegular for anything but a regular
// file, and fs.ErrNotExist for nothing there.
func (l *LocalFS) Open(p string) (*os.File, int64, error) {
	if err := CheckRelPath(p); err != nil {
		return nil, 0, err
	}
	// Look first, so a device or FIFO is not even opened: opening some
	// devices does something. The check that counts is openRegular's,
	// made on the open file, since p may be replaced in between.
	fi, err := l.root.Stat(p)
	if err != nil {
		return nil, 0, l.fail("open", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, notRegular(p, fi.Mode())
	}
	return l.openRegular(p)
}

// openRegular opens p and keeps it only when the open file is a regular
// file. O_NONBLOCK keeps a FIFO without a writer from blocking the open
// (and the server) forever; O_NOCTTY keeps a terminal from becoming the
// server's. Once the file is known to be regular the flag is cleared, so
// reads behave as usual on a filesystem that would honour it.
func (l *LocalFS) openRegular(p string) (*os.File, int64, error) {
	f, err := l.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, l.fail("open", p, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(p, fi.Mode())
	}
	if err == nil {
		err = l.checkLanding(p, f)
	}
	if err == nil {
		err = setBlocking(f)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, ErrNotRegular) {
			return nil, 0, err
		}
		return nil, 0, l.fail("open", p, err)
	}
	return f, fi.Size(), nil
}

// checkLanding refuses an opened file or folder that a symlink inside the
// project led into .git, where a repository keeps credentials and hooks:
// os.Root keeps links inside the folder but knows nothing of .git. Where the
// descriptor really points is read back from /proc.
func (l *LocalFS) checkLanding(p string, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var real string
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		real, lerr = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd)))
	}); err != nil {
		return err
	}
	if lerr != nil {
		return fmt.Errorf("workspace: where %q leads: %w", p, lerr)
	}
	rel, err := filepath.Rel(l.real, real)
	if err != nil || rel == "." {
		return err
	}
	if CheckRelPath(rel) != nil {
		return fmt.Errorf("workspace: %q leads to %q: %w", p, rel, ErrOutsideRoot)
	}
	return nil
}

func setBlocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var inner error
	if err := rc.Control(func(fd uintptr) { inner = unix.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return inner
}

func notRegular(p string, m fs.FileMode) error {
	return fmt.Errorf("workspace: open %q: %w (%s)", p, ErrNotRegular, kindName(m))
}

// kindName names a file type for a person reading an error.
func kindName(m fs.FileMode) string {
	switch m.Type() {
	case fs.ModeDir:
		return "a folder"
	case fs.ModeNamedPipe:
		return "a FIFO"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	case fs.ModeSymlink:
		return "a symlink"
	}
	return "not a file"
}

func kindOfMode(m fs.FileMode) FileKind {
	switch {
	case m.IsRegular():
		return KindFile
	case m.IsDir():
		return KindDir
	case m&fs.ModeSymlink != 0:
		return KindSymlink
	}
	return KindOther
}

func kindOf(mode uint32) FileKind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return KindFile
	case unix.S_IFDIR:
		return KindDir
	case unix.S_IFLNK:
		return KindSymlink
	}
	return KindOther
}

// readlinkAt returns the text of the symlink name in the folder dirfd,
// made valid UTF-8 for display. Linux caps a symlink's text below
// PATH_MAX, so one buffer of that size holds it whole.
func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return strings.ToValidUTF8(string(buf[:n]), "\uFFFD"), nil
}
