package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"atelier/fault"
)

// ErrRootMoved refuses to read a Local project whose folder is no longer
// the one admitted at creation: it was moved, replaced (by a symlink or by
// another folder), or a folder on its way changed hands. Nothing is served
// from it until it is put back.
var ErrRootMoved = fault.New(fault.Conflict, "root_moved", "workspace: the project's folder was moved or replaced",
	"This project's folder is no longer the one it was created with: it was moved or replaced, or a folder above it changed hands, so nothing is read from it. Put the folder back, or create the project again.")

// Identity is what a Local folder was when its project was created: its
// path with every symlink resolved, and the device and inode found there.
// The project row keeps it for the project's life.
type Identity struct {
	Path string
	Dev  uint64
	Ino  uint64
}

// UIDRange is the block of uids given to session users (sandbox.Config's
// UIDBase and UIDCount).
type UIDRange struct {
	Base, Count uint32
}

// Contains reports whether uid is a session user's.
func (r UIDRange) Contains(uid uint32) bool {
	return uid >= r.Base && uint64(uid) < uint64(r.Base)+uint64(r.Count)
}

// LocalPolicy is the operator's say over Local folders.
type LocalPolicy struct {
	// Roots are the folders at or below which anyone may create a Local
	// project (ATELIER_LOCAL_ROOTS); site admins may use any folder the
	// guard allows. Each is absolute and clean.
	Roots []string
	// SessionUIDs never own a Local folder nor any folder above one.
	SessionUIDs UIDRange
	// InContainer says the server runs in Atelier's container, which sees
	// only what compose.yaml mounts into it, so a folder it cannot see may
	// be one not mounted there; the hints say so only then, and speak of
	// the server's own file system otherwise.
	InContainer bool
}

// LocalOffer is what the new-project form tells a person before they type:
// whether they may use any folder the guard allows, or only those below
// Roots (none at all when Roots is empty).
type LocalOffer struct {
	Anywhere bool
	Roots    []string
}

// Available reports whether the person may create a Local project at all.
func (o LocalOffer) Available() bool { return o.Anywhere || len(o.Roots) > 0 }

// LocalOffer says where someone may create Local projects; it is the rule
// AdmitLocal applies.
func (w *Workspaces) LocalOffer(siteAdmin bool) LocalOffer {
	if siteAdmin {
		return LocalOffer{Anywhere: true}
	}
	return LocalOffer{Roots: append([]string(nil), w.localRoots...)}
}

// unsafeFolderError is a folder on the way to a Local folder (or the folder
// itself) that a session user could change: one they own, or one writable
// by group or others without the sticky bit, in which anyone may rename
// what others made.
type unsafeFolderError struct {
	dir      string
	uid      uint32
	mode     uint32
	sessions bool // owned by a session user
}

func (e *unsafeFolderError) Error() string {
	return "workspace: " + strings.TrimSuffix(e.sentence(), ".")
}

func (e *unsafeFolderError) sentence() string {
	if e.sessions {
		return fmt.Sprintf("%s belongs to a session user (uid %d).", e.dir, e.uid)
	}
	return fmt.Sprintf("%s may be written by group or others (mode %04o) and has no sticky bit.", e.dir, e.mode&0o7777)
}

// checkFolder refuses a folder a session user could change (see
// unsafeFolderError). Root owns most of the way; a host account outside
// the sessions' block is a person's or a service's, which the operator
// answers for.
func (w *Workspaces) checkFolder(dir string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("workspace: %s: %w", dir, unix.ENOTDIR)
	}
	if st.Uid != 0 && w.sessionUIDs.Contains(st.Uid) {
		return &unsafeFolderError{dir: dir, uid: st.Uid, mode: st.Mode, sessions: true}
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return &unsafeFolderError{dir: dir, uid: st.Uid, mode: st.Mode}
	}
	return nil
}

// walkFlags open each folder on the way as a bare handle: O_PATH needs no
// permission to read it and opens none of its contents, and with
// O_NOFOLLOW and O_DIRECTORY a symlink is refused as "not a directory".
const walkFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openChecked opens the clean absolute folder dir one component at a time
// from /, each relative to the one before, following no symlink at all,
// and checks every folder on the way, dir included, with checkFolder. It
// returns the descriptor of dir, which the caller closes, and its stat.
// Because each step opens a name inside an already open folder, renaming
// anything above while the walk runs cannot lead it elsewhere.
func (w *Workspaces) openChecked(dir string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openat(unix.AT_FDCWD, "/")
	if err != nil {
		return -1, st, fmt.Errorf("workspace: open /: %w", err)
	}
	at := "/"
	var names []string
	if dir != "/" {
		names = strings.Split(dir[1:], "/")
	}
	for i := 0; ; i++ {
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, st, fmt.Errorf("workspace: stat %s: %w", at, err)
		}
		if err := w.checkFolder(at, &st); err != nil {
			unix.Close(fd)
			return -1, st, err
		}
		if i == len(names) {
			return fd, st, nil
		}
		next, err := openat(fd, names[i])
		unix.Close(fd)
		at = filepath.Join(at, names[i])
		if err != nil {
			return -1, st, fmt.Errorf("workspace: open %s: %w", at, err)
		}
		fd = next
	}
}

func openat(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, walkFlags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// identify walks to the resolved folder dir as openChecked does and
// returns what it found there.
func (w *Workspaces) identify(dir string) (Identity, error) {
	fd, st, err := w.openChecked(dir)
	if err != nil {
		return Identity{}, err
	}
	unix.Close(fd)
	return Identity{Path: dir, Dev: st.Dev, Ino: st.Ino}, nil
}

// OpenLocal opens a Local project's folder for reading, and is the only way
// to: the Code page, the remotes and an edit session's base all come
// through it. On every call it re-derives the root (ScopeRoot), then walks
// to the folder recorded at creation with openChecked, so no symlink is
// followed, not even one that was there at creation (the recorded path has
// them resolved), and every folder on the way is checked again; the folder
// reached must be the recorded device and inode. A folder moved, deleted,
// replaced by a link or by another folder, or one whose way a session user
// could now change, is ErrRootMoved. A row without a recorded identity
// (written before identities were kept, and not adopted at start-up by
// projects.Service.RecordLocalIdentities) is ErrRootMoved too: nothing is
// read from a folder that was never confirmed.
func (w *Workspaces) OpenLocal(loc Location) (*LocalFS, error) {
	if loc.Mode != Local {
		return nil, w.unsafe(loc, "not a local project")
	}
	if _, err := w.ScopeRoot(loc); err != nil {
		return nil, err
	}
	id := loc.Identity
	if id == nil {
		return nil, fmt.Errorf("workspace: project %q: no folder identity recorded: %w", loc.DirName, ErrRootMoved)
	}
	if pe := w.lexical(id.Path); pe != nil {
		w.log.Error("workspace: recorded local folder fails the lexical guard",
			"dir_name", loc.DirName, "path", id.Path, "reason", pe.Reason)
		return nil, fmt.Errorf("workspace: recorded folder of project %q: %w: %w", loc.DirName, ErrUnsafeRoot, pe)
	}
	fd, st, err := w.openChecked(id.Path)
	var unsafe *unsafeFolderError
	switch {
	case errors.As(err, &unsafe), errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		w.log.Warn("workspace: local folder moved or exposed", "dir_name", loc.DirName, "path", id.Path, "err", err)
		return nil, fmt.Errorf("workspace: project %q: %w: %w", loc.DirName, ErrRootMoved, err)
	case err != nil:
		return nil, err
	}
	defer unix.Close(fd)
	if st.Dev != id.Dev || st.Ino != id.Ino {
		w.log.Warn("workspace: local folder replaced", "dir_name", loc.DirName, "path", id.Path)
		return nil, fmt.Errorf("workspace: project %q: %s is another folder than at creation: %w", loc.DirName, id.Path, ErrRootMoved)
	}
	// The magic link of the checked descriptor opens that very folder,
	// whatever its path has become meanwhile.
	r, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("workspace: open project folder: %w", err)
	}
	fi, err := r.Stat(".")
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("workspace: open project folder: %w", err)
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); !ok || sys.Dev != id.Dev || sys.Ino != id.Ino {
		r.Close()
		return nil, fmt.Errorf("workspace: project %q: the opened folder is not the checked one: %w", loc.DirName, ErrRootMoved)
	}
	return &LocalFS{root: r, real: id.Path, escape: escapeError(r)}, nil
}
