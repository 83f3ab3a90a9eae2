package gitsvc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Fork creates the bare repository name whose branch main points at commit
// of from, sharing from's objects through git's alternates instead of
// copying them: forking costs the same for a repository of ten files or of
// a million. from must keep commit reachable while the fork lives, which a
// canonical branch that only moves forward does. Remove it with RemoveRepo.
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
	alternates := filepath.Join(r.GitDir, "objects", "info", "alternates")
	if err := os.WriteFile(alternates, []byte(filepath.Join(from.GitDir, "objects")+"\n"), 0o644); err != nil {
		return fmt.Errorf("gitsvc: fork: %w", err)
	}
	update := newCommand("update-ref", "--end-of-options", mainRef).val(commit).lit("")
	if _, err := s.run(ctx, update, runOpts{repo: r}); err != nil {
		return fmt.Errorf("gitsvc: fork at %s: %w", commit, err)
	}
	return nil
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
