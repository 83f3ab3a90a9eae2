//go:build linux

package injail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// errUnplaceable: a generated file's place inside the jail is in a folder
// the session's user writes, behind too many links, or in a read-only
// folder where it does not exist. The file is left out.
var errUnplaceable = errors.New("no place for the file in the jail")

// userFolders are where the session's user writes, inside the jail. No
// link is followed into them and nothing is created there as root: what
// they hold is the user's to choose.
var userFolders = []string{Workspace, Home, "/tmp", "/dev", "/proc"}

// resolveInJail is where p, a path inside the jail, leads there: every
// link on the way is read from the jail's tree under root (the new root,
// before the pivot), one component at a time, so the kernel follows none,
// and an absolute link starts again at the jail's root, not the host's.
// The end may not exist yet. A way into userFolders is errUnplaceable.
func resolveInJail(root, p string) (string, error) {
	done := "/"
	rest := strings.Split(p, "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, c)
		if inUserFolder(next) {
			return "", fmt.Errorf("%s: %w", p, errUnplaceable)
		}
		st, err := os.Lstat(root + next)
		if errors.Is(err, fs.ErrNotExist) {
			// What is left is made below next; a ".." there would lead
			// through a folder that does not exist.
			at := path.Join(append([]string{next}, rest...)...)
			if slices.Contains(rest, "..") || inUserFolder(at) {
				return "", fmt.Errorf("%s: %w", p, errUnplaceable)
			}
			return at, nil
		}
		if err != nil {
			return "", err
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("%s: %w", p, errUnplaceable)
		}
		target, err := os.Readlink(root + next)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return done, nil
}

func inUserFolder(p string) bool {
	for _, f := range userFolders {
		if p == f || strings.HasPrefix(p, f+"/") {
			return true
		}
	}
	return false
}

// placeInJail makes content the file seen at p inside the jail (root is
// the new root before the pivot), read-only: bound over the file p leads
// to, or, when that does not exist and create is set, written there on
// the jail's own root with the folders above it. A place in a folder of
// the session's user, or missing in a read-only folder, is left alone. It
// returns where p leads.
func placeInJail(root, p, content string, create bool) (at string, err error) {
	at, err = resolveInJail(root, p)
	if errors.Is(err, errUnplaceable) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	target := root + at
	st, err := os.Lstat(target)
	switch {
	case err == nil && st.Mode().IsRegular():
		return at, bindFile(root, target, content)
	case err == nil || !errors.Is(err, fs.ErrNotExist) || !create:
		return at, nil // a folder or a device is not replaced; a missing file is not made
	}
	// Every folder that exists on the way is no link (resolveInJail read
	// each), and those made here are new.
	dir := root
	for _, c := range strings.Split(path.Dir(at), "/") {
		if c == "" {
			continue
		}
		dir += "/" + c
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			if errors.Is(err, unix.EROFS) {
				return at, nil
			}
			return at, err
		}
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if errors.Is(err, unix.EROFS) {
		return at, nil
	}
	if err != nil {
		return at, err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return at, err
}

// bindFile binds a read-only file holding content over target. The staged
// file is unlinked once bound: the mount keeps it, and / shows nothing
// extra.
func bindFile(root, target, content string) error {
	staged := root + "/.staged"
	if err := os.WriteFile(staged, []byte(content), 0o644); err != nil {
		return err
	}
	defer os.Remove(staged)
	if err := unix.Mount(staged, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", strings.TrimPrefix(target, root), err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("restrict %s: %w", strings.TrimPrefix(target, root), err)
	}
	return nil
}
