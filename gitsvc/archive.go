package gitsvc

import (
	"context"
	"fmt"
	"io"
)

// Archive writes the tree of commit to w as a tar stream: files with their
// executable bit, folders, and symlinks as links. Whoever unpacks it must
// not trust its names (sandbox's unpack keeps every entry inside its
// folder).
func (s *Service) Archive(ctx context.Context, r *Repo, commit string, w io.Writer) error {
	if err := checkOIDs([]string{commit}); err != nil {
		return err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return err
	}
	defer release()
	if _, err := s.run(ctx, newCommand("archive", "--format=tar", "--end-of-options").val(commit), runOpts{repo: r, stdout: w}); err != nil {
		return fmt.Errorf("gitsvc: archive %s: %w", commit, err)
	}
	return nil
}
