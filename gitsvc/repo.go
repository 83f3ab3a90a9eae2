package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"atelier/fault"
)

const maxName = 64

// validName reports whether name matches ^[A-Za-z0-9_-]{1,64}$: no '/', never
// "." or "..", so <Root>/<name>.git stays under Root.
func validName(name string) bool {
	if len(name) == 0 || len(name) > maxName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CanonicalPath is where the canonical repository name lives: <Root>/<name>.git.
func (s *Service) CanonicalPath(name string) (string, error) {
	if !validName(name) {
		return "", fmt.Errorf("%w: %q", ErrBadName, name)
	}
	return filepath.Join(s.root, name+".git"), nil
}

// CreateCanonical creates the bare repository name with branch main holding
// one commit of the empty tree, "Create project", and returns that commit.
// An existing folder is refused with an error wrapping fs.ErrExist.
func (s *Service) CreateCanonical(ctx context.Context, name string) (*Repo, string, error) {
	p, err := s.CanonicalPath(name)
	if err != nil {
		return nil, "", err
	}
	// Mkdir, not MkdirAll: of two concurrent creations exactly one gets it.
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, "", fmt.Errorf("gitsvc: create %s: %w", name, err)
	}
	r := &Repo{GitDir: p}
	commit, err := s.initCanonical(ctx, r)
	if err != nil {
		// Nobody was told about the folder; take it away again so the
		// name can be used once more.
		if rmErr := os.RemoveAll(p); rmErr != nil {
			s.log.Warn("gitsvc: clean up failed create", "repo", p, "err", rmErr)
		}
		return nil, "", err
	}
	return r, commit, nil
}

func (s *Service) initCanonical(ctx context.Context, r *Repo) (string, error) {
	release, err := s.lock(ctx, r.GitDir, true)
	if err != nil {
		return "", err
	}
	defer release()
	init := newCommand("init", "--bare", "--quiet", "--initial-branch=main")
	if _, err := s.run(ctx, init, runOpts{dir: r.GitDir}); err != nil {
		return "", err
	}
	// mktree writes the empty tree for real; the well-known hash alone is
	// an object git only pretends to have.
	out, err := s.run(ctx, newCommand("mktree"), runOpts{repo: r})
	if err != nil {
		return "", err
	}
	return s.commit(ctx, r, strings.TrimSpace(string(out)), nil, "Create project")
}

// RemoveRepo removes the canonical repository name, under its write lock.
// The repository is first moved aside in one rename, so nobody sees half of
// it. Its lock file goes with it: a waiter that gets the lock afterwards
// finds no repository and fails.
func (s *Service) RemoveRepo(ctx context.Context, name string) error {
	p, err := s.CanonicalPath(name)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("gitsvc: remove %s: %w: %w", name, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("gitsvc: remove %s: %w", name, err)
	}
	if !fi.IsDir() {
		// A symlink in particular: never follow one out of Root.
		return fmt.Errorf("gitsvc: remove %s: %s is not a folder", name, p)
	}
	release, err := s.lock(ctx, p, true)
	if err != nil {
		return err
	}
	defer release()
	trash, err := os.MkdirTemp(s.root, trashPrefix)
	if err != nil {
		return fmt.Errorf("gitsvc: remove %s: %w", name, err)
	}
	if err := os.Rename(p, filepath.Join(trash, "repo")); err != nil {
		os.Remove(trash)
		return fmt.Errorf("gitsvc: remove %s: %w", name, err)
	}
	// Once renamed, the repository is gone for everyone: what is left in
	// the trash is disk space, not a failed removal. A process that still
	// holds a folder of it (a reader that ran without the lock) can add
	// files while they are deleted, so a failed pass is tried again, and
	// what still stays is swept at the next start.
	for attempt := 0; ; attempt++ {
		err := os.RemoveAll(trash)
		if err == nil {
			break
		}
		if attempt == trashAttempts-1 {
			s.log.Warn("gitsvc: remove: left for the next sweep", "repo", name, "err", err)
			break
		}
		time.Sleep(trashRetry)
	}
	return nil
}

// A removal that a late writer defeats is tried trashAttempts times, a
// pause apart.
const (
	trashAttempts = 5
	trashRetry    = 20 * time.Millisecond
)

// OpenBare returns the managed bare repository name (a project's canonical
// repository or a session's fork), or ErrNotFound. It starts no process and
// takes no lock.
func (s *Service) OpenBare(name string) (*Repo, error) {
	p, err := s.CanonicalPath(name)
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(p)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a folder", p)
	}
	if err == nil {
		_, err = os.Stat(filepath.Join(p, "HEAD"))
	}
	if err != nil {
		return nil, fmt.Errorf("gitsvc: open %s: %w: %w", name, ErrNotFound, err)
	}
	return &Repo{GitDir: p}, nil
}

// OpenLocal finds the repository of folder, which must be its top level (or
// a bare repository itself); a folder inside some other repository is not
// one. It runs `git rev-parse --path-format=absolute --git-common-dir`, so
// for a worktree GitDir is the main repository's git dir. Only git's exit
// 128 with its "not a git repository" message gives ErrNotRepository; any
// other failure is an error of its own. A missing folder wraps
// fs.ErrNotExist.
func (s *Service) OpenLocal(ctx context.Context, folder string) (*Repo, error) {
	if !filepath.IsAbs(folder) || strings.ContainsAny(folder, "\n\x00") {
		return nil, fault.Detailf(ErrBadArgument, ": folder %q", folder)
	}
	real, err := filepath.EvalSymlinks(folder)
	if err != nil {
		return nil, fmt.Errorf("gitsvc: open %s: %w", folder, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("gitsvc: open %s: %w", folder, err)
	}
	if !fi.IsDir() {
		return nil, fault.Detailf(ErrBadArgument, ": %s is not a folder", folder)
	}
	owner := ownerOf(fi)
	c := newCommand("rev-parse", "--path-format=absolute",
		"--git-common-dir", "--git-dir", "--is-bare-repository", "--is-inside-work-tree")
	out, err := s.run(ctx, c, runOpts{dir: real, owner: owner})
	if isNotRepository(err) {
		return nil, fmt.Errorf("gitsvc: %s: %w: %w", folder, ErrNotRepository, err)
	}
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 4 || !filepath.IsAbs(lines[0]) || !filepath.IsAbs(lines[1]) {
		return nil, fmt.Errorf("gitsvc: open %s: unexpected rev-parse output %q", folder, out)
	}
	r := &Repo{GitDir: filepath.Clean(lines[0]), owner: owner}
	if own := filepath.Clean(lines[1]); own != r.GitDir {
		r.own = own
	}
	if lines[3] == "true" {
		// Discovery stopped at folder, so being inside a work tree means
		// folder is its top level.
		r.WorkTree = real
	}
	return r, nil
}

// ownerOf is the account git runs as in a folder with these attributes:
// its owner, or nil (the server itself) when root owns it.
//
// A folder root owns is the operator's own, and root runs git there: git
// itself refuses, as root, a git dir in it that belongs to anyone else
// (safe.directory, which the service never relaxes), so the config it
// reads is root's. Any other owner's git runs as that owner, never as root
// and never with a safe.directory exception: a program the owner named in
// the folder's config runs with no more rights than the owner has, and
// whatever git writes there belongs to them.
func ownerOf(fi os.FileInfo) *account {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	return &account{uid: st.Uid, gid: st.Gid}
}

func checkRepo(r *Repo) error {
	if r == nil || !filepath.IsAbs(r.GitDir) {
		return fault.Detailf(ErrBadArgument, ": no repository")
	}
	return nil
}

// rlock takes r's lock after checking r.
func (s *Service) rlock(ctx context.Context, r *Repo, write bool) (func(), error) {
	if err := checkRepo(r); err != nil {
		return nil, err
	}
	if r.owner != nil {
		// OpenLocal's GitDir is the real path git found. Resolving it
		// again would follow a link its owner put in since; the lock
		// file is opened without following any instead.
		return s.lockAs(ctx, r.GitDir, write, r.owner)
	}
	key, err := resolveGitDir(r.GitDir)
	if err != nil {
		return nil, err
	}
	return s.lockAs(ctx, key, write, nil)
}

// Head returns the commit HEAD points at and its branch ("" when HEAD is
// detached). An unborn HEAD (no commit yet) is ErrNotFound. For a worktree
// this is the worktree's own HEAD.
func (s *Service) Head(ctx context.Context, r *Repo) (commit, branch string, err error) {
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return "", "", err
	}
	defer release()
	out, err := s.run(ctx, newCommand("symbolic-ref", "--quiet", "HEAD"), runOpts{repo: r})
	switch {
	case err == nil:
		branch = strings.TrimPrefix(strings.TrimSpace(string(out)), "refs/heads/")
	case exitCode(err) != 1: // 1: detached
		return "", "", err
	}
	commit, err = s.resolve(ctx, r, "HEAD^{commit}")
	if err != nil {
		return "", "", err
	}
	return commit, branch, nil
}

// ResolveCommit returns the full hash of the commit rev names, or
// ErrNotFound.
func (s *Service) ResolveCommit(ctx context.Context, r *Repo, rev string) (string, error) {
	return s.resolvePeeled(ctx, r, rev, "^{commit}")
}

// ResolveTree returns the full hash of the tree of the commit rev names, or
// ErrNotFound.
func (s *Service) ResolveTree(ctx context.Context, r *Repo, rev string) (string, error) {
	return s.resolvePeeled(ctx, r, rev, "^{commit}^{tree}")
}

// resolvePeeled resolves a user's rev peeled by a fixed suffix, under the
// repository's read lock.
func (s *Service) resolvePeeled(ctx context.Context, r *Repo, rev, peel string) (string, error) {
	if err := checkValue(rev); err != nil {
		return "", err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return "", err
	}
	defer release()
	return s.resolve(ctx, r, rev+peel)
}

// resolve runs rev-parse --verify on spec, a user's value with a peel suffix.
func (s *Service) resolve(ctx context.Context, r *Repo, spec string) (string, error) {
	c := newCommand("rev-parse", "--verify", "--quiet", "--end-of-options").val(spec)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if exitCode(err) == 1 {
		return "", fmt.Errorf("gitsvc: %s: %w", spec, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	oid := strings.TrimSpace(string(out))
	if !isOID(oid) {
		return "", fmt.Errorf("gitsvc: rev-parse %s: unexpected output %q", spec, out)
	}
	return oid, nil
}

// isOID reports whether s is a full object name: 40 (SHA-1) or 64
// (SHA-256) lowercase hex digits.
func isOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
