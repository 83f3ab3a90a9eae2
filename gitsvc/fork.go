package gitsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Fork creates the bare repository name whose branch main points at commit
// of from, sharing from's objects through git's alternates instead of
// copying them: forking costs the same for a repository of ten files or of
// a million. from must keep commit reachable while the fork lives, which a
// canonical branch that only moves forward does. Remove it with RemoveRepo.
//
// A repository with an owner (a Local folder of someone else's) is not
// shared: root reading objects through alternates in a folder its owner
// controls would read whatever the owner points them at later (another
// repository's objects dir, chained alternates), as root. Its commit and
// tree are copied instead, read by git running as the owner, and the fork
// is shallow at commit.
func (s *Service) Fork(ctx context.Context, from *Repo, commit, name string) (*Repo, error) {
	if err := checkOIDs([]string{commit}); err != nil {
		return nil, err
	}
	p, err := s.CanonicalPath(name)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("gitsvc: fork %s: %w", name, err)
	}
	r := &Repo{GitDir: p}
	if err := s.initFork(ctx, from, r, commit); err != nil {
		if rmErr := os.RemoveAll(p); rmErr != nil {
			s.log.Warn("gitsvc: clean up failed fork", "repo", p, "err", rmErr)
		}
		return nil, err
	}
	return r, nil
}

func (s *Service) initFork(ctx context.Context, from, r *Repo, commit string) error {
	// The source is read (its objects are borrowed) while the fork is made.
	releaseFrom, err := s.rlock(ctx, from, false)
	if err != nil {
		return err
	}
	defer releaseFrom()
	release, err := s.lock(ctx, r.GitDir, true)
	if err != nil {
		return err
	}
	defer release()
	if _, err := s.run(ctx, newCommand("init", "--bare", "--quiet", "--initial-branch=main"), runOpts{dir: r.GitDir}); err != nil {
		return err
	}
	if from.owner != nil {
		if err := s.copySnapshot(ctx, from, r, commit); err != nil {
			return err
		}
	} else {
		alternates := filepath.Join(r.GitDir, "objects", "info", "alternates")
		if err := os.WriteFile(alternates, []byte(filepath.Join(from.GitDir, "objects")+"\n"), 0o644); err != nil {
			return fmt.Errorf("gitsvc: fork: %w", err)
		}
	}
	update := newCommand("update-ref", "--end-of-options", mainRef).val(commit).lit("")
	if _, err := s.run(ctx, update, runOpts{repo: r}); err != nil {
		return fmt.Errorf("gitsvc: fork at %s: %w", commit, err)
	}
	return nil
}

// copySnapshot copies commit and every object of its tree from `from` into
// r: git lists and packs them as from's owner, and r indexes the pack
// (checking every object's name against its content). History is not
// copied; r records commit as its shallow boundary.
func (s *Service) copySnapshot(ctx context.Context, from, r *Repo, commit string) error {
	list, err := s.run(ctx, newCommand("rev-list", "--objects", "--no-walk", "--end-of-options").val(commit), runOpts{repo: from})
	if err != nil {
		return fmt.Errorf("gitsvc: fork: list %s: %w", commit, err)
	}
	if err := s.packInto(ctx, from, r, list); err != nil {
		return fmt.Errorf("gitsvc: fork: copy %s: %w", commit, err)
	}
	// Appended: a fork brought up to a newer base keeps its older ones.
	f, err := os.OpenFile(filepath.Join(r.GitDir, "shallow"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteString(commit + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("gitsvc: fork: %w", err)
	}
	return nil
}

// CopySnapshot brings commit and its tree from `from` (a Local folder's
// repository, read as its owner) into the fork r made by Fork, as Fork
// does for its first commit: r then has commit as one more shallow
// boundary.
func (s *Service) CopySnapshot(ctx context.Context, from, r *Repo, commit string) error {
	if err := checkOIDs([]string{commit}); err != nil {
		return err
	}
	releaseFrom, err := s.rlock(ctx, from, false)
	if err != nil {
		return err
	}
	defer releaseFrom()
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return err
	}
	defer release()
	return s.copySnapshot(ctx, from, r, commit)
}

// Names lists the repositories under Root whose names start with prefix.
func (s *Service) Names(prefix string) ([]string, error) {
	des, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("gitsvc: list repositories: %w", err)
	}
	var names []string
	for _, d := range des {
		name, ok := strings.CutSuffix(d.Name(), ".git")
		if ok && d.IsDir() && strings.HasPrefix(name, prefix) && validName(name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// packInto moves the objects list names (rev-list --objects output) from
// one repository into another: git packs them in from, as from's owner,
// and into indexes the pack, checking every object's name against its
// content, as into's owner.
func (s *Service) packInto(ctx context.Context, from, into *Repo, list []byte) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.run(ctx, newCommand("pack-objects", "--stdout", "--quiet"), runOpts{repo: from, stdin: bytes.NewReader(list), stdout: pw})
		pw.CloseWithError(err)
		done <- err
	}()
	_, err := s.run(ctx, newCommand("index-pack", "--stdin"), runOpts{repo: into, stdin: pr})
	pr.CloseWithError(io.ErrClosedPipe) // pack-objects stops if index-pack did
	return errors.Join(<-done, err)
}
