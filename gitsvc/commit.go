package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"atelier/fault"
)

// mainRef is the branch the service commits to.
const mainRef = "refs/heads/main"

// CommitTree commits the files of dir, a plain folder (no .git in it), as a
// new tree on main, under r's write lock, and returns the new commit.
//
// parents[0], if any, must be the commit main points at now: main moves
// only from there (update-ref with the old value), so a commit someone else
// made meanwhile is never overwritten; that case is ErrConflict. No parents
// means main must not exist yet. Parents are full hashes.
//
// The files are added as `git add -A` sees them, with a temporary index:
// .gitignore files in dir are honoured, and a nested repository becomes a
// submodule entry.
func (s *Service) CommitTree(ctx context.Context, r *Repo, dir string, parents []string, message string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fault.Detailf(ErrBadArgument, ": folder %q is not absolute", dir)
	}
	if err := checkOIDs(parents); err != nil {
		return "", err
	}
	if fi, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("gitsvc: commit %s: %w", dir, err)
	} else if !fi.IsDir() {
		return "", fault.Detailf(ErrBadArgument, ": %s is not a folder", dir)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		return "", fault.Detailf(ErrBadArgument, ": %s holds .git", dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("gitsvc: commit %s: %w", dir, err)
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer release()

	tmp, err := os.MkdirTemp(s.tmp, "index-")
	if err != nil {
		return "", fmt.Errorf("gitsvc: commit: %w", err)
	}
	defer os.RemoveAll(tmp)
	o := runOpts{repo: r, workTree: dir, env: []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}}
	if _, err := s.run(ctx, newCommand("add", "--all"), o); err != nil {
		return "", err
	}
	out, err := s.run(ctx, newCommand("write-tree"), o)
	if err != nil {
		return "", err
	}
	return s.commit(ctx, r, strings.TrimSpace(string(out)), parents, message)
}

// CommitWithParents commits tree with the given parents on main, under r's
// write lock, with the same rule as CommitTree: main must point at
// parents[0]. An import uses it to keep the source's history as a second
// parent.
func (s *Service) CommitWithParents(ctx context.Context, r *Repo, tree string, parents []string, message string) (string, error) {
	if err := checkOIDs(append([]string{tree}, parents...)); err != nil {
		return "", err
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer release()
	return s.commit(ctx, r, tree, parents, message)
}

// commit writes the commit object and moves main to it from parents[0] (or
// from nothing). The caller holds the write lock.
func (s *Service) commit(ctx context.Context, r *Repo, tree string, parents []string, message string) (string, error) {
	c := newCommand("commit-tree")
	for _, p := range parents {
		c.lit("-p").val(p)
	}
	c.lit("--end-of-options").val(tree)
	// The message goes on stdin: it is text, never an argument.
	out, err := s.run(ctx, c, runOpts{repo: r, stdin: strings.NewReader(message)})
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(out))
	if !isOID(commit) {
		return "", fmt.Errorf("gitsvc: commit-tree: unexpected output %q", out)
	}
	update := newCommand("update-ref", "--end-of-options", mainRef).val(commit)
	if len(parents) > 0 {
		update.val(parents[0])
	} else {
		update.lit("") // main must not exist
	}
	if _, err := s.run(ctx, update, runOpts{repo: r}); err != nil {
		if isStale(err) {
			return "", fmt.Errorf("gitsvc: move main to %s: %w: %w", commit, ErrConflict, err)
		}
		return "", err
	}
	return commit, nil
}

// isStale recognises update-ref refusing because the ref is not at the old
// value: moved, already created or gone.
func isStale(err error) bool {
	msg := stderrOf(err)
	return exitCode(err) == 128 && strings.Contains(msg, "cannot lock ref") &&
		(strings.Contains(msg, "but expected") ||
			strings.Contains(msg, "reference already exists") ||
			strings.Contains(msg, "unable to resolve reference"))
}

func checkOIDs(oids []string) error {
	for _, o := range oids {
		if !isOID(o) {
			return fault.Detailf(ErrBadArgument, ": %q is not a full object hash", o)
		}
	}
	return nil
}
