package pgembed

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// ErrDirNotSearchable reports a folder above the cluster directory that the
// user PostgreSQL runs as cannot enter.
var ErrDirNotSearchable = errors.New("pgembed: folder not searchable by the PostgreSQL user")

// account is the unprivileged user the cluster runs as when we are root,
// since PostgreSQL refuses to run as root.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
}

// clusterAccount returns the user to run initdb and postgres as: nil when we
// are not root (they run as we do), else postgres, else nobody.
func clusterAccount() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		a := &account{name: name, uid: uint32(uid), gid: uint32(gid)}
		ids, _ := u.GroupIds() // without them the user keeps only its primary group
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				a.groups = append(a.groups, uint32(g))
			}
		}
		return a, nil
	}
	return nil, errors.New("pgembed: running as root, but neither a postgres nor a nobody user exists to run PostgreSQL as")
}

func (a *account) credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

// canSearch tells whether the user may enter the folder fi describes, by the
// permission bits the kernel would pick for it (ACLs are not considered).
func (a *account) canSearch(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == a.uid:
		return perm&0o100 != 0
	case st.Gid == a.gid || slices.Contains(a.groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// checkAncestors fails, naming the outermost such folder, when the user
// cannot pass through one of the folders above dir. The folders are the
// user's to open up; we do not change their modes behind their back.
func (a *account) checkAncestors(dir string) error {
	starts := []string{filepath.Dir(dir)}
	if real, err := filepath.EvalSymlinks(starts[0]); err == nil && real != starts[0] {
		starts = append(starts, real) // the link's target folders must be searchable too
	}
	for _, start := range starts {
		var chain []string
		for p := start; ; p = filepath.Dir(p) {
			chain = append(chain, p)
			if filepath.Dir(p) == p {
				break
			}
		}
		slices.Reverse(chain)
		for _, p := range chain {
			fi, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("pgembed: %w", err)
			}
			if !a.canSearch(fi) {
				return fmt.Errorf("%w: PostgreSQL runs as user %s (uid %d) and cannot enter %s (mode %v); make it searchable (chmod o+x %s) or put the data elsewhere",
					ErrDirNotSearchable, a.name, a.uid, p, fi.Mode().Perm(), p)
			}
		}
	}
	return nil
}

// chownTree gives dir and everything under it to the user. It is used when a
// cluster made for another user (nobody before a postgres user existed) is
// started again.
func (a *account) chownTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(a.uid), int(a.gid))
	})
}

// owns tells whether path belongs to the user.
func (a *account) owns(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == a.uid && st.Gid == a.gid
}
