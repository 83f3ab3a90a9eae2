//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// PrepareDir makes path a directory of mode 0700 owned by uid:gid, for a
// session's checkout or home: root prepares it and the session's user owns
// it. An existing directory is taken over (its contents are left as they
// are); a symbolic link at path is refused with ErrSymlink, anything else
// that is not a directory with an error. The parent is the caller's: it
// should be root's and not writable by sessions.
func PrepareDir(path string, uid, gid uint32) error {
	if !cleanAbs(path) {
		return fmt.Errorf("%w: %q is not a clean absolute path", ErrBadSpec, path)
	}
	if isSymlink(path) {
		return fmt.Errorf("%w: %s", ErrSymlink, path)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sandbox: prepare %s: %w", path, err)
	}
	// O_NOFOLLOW refuses a symlink, also one swapped in after the checks;
	// the changes then go through the descriptor, to what was opened.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if isSymlink(path) {
			return fmt.Errorf("%w: %s", ErrSymlink, path)
		}
		return fmt.Errorf("sandbox: prepare %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		return fmt.Errorf("sandbox: prepare %s: %w", path, err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("sandbox: prepare %s: %w", path, err)
	}
	return nil
}

func isSymlink(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode()&fs.ModeSymlink != 0
}
