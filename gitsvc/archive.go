package gitsvc

import (
	"context"
	"fmt"
	"io"
)

// Archive writes the tree of commit to w as a tar stream: files with their
// executable bit, folders, and symlinks as links, as a checkout has them.
// Whoever unpacks it must not trust its names (sandbox's unpack keeps
// every entry inside its folder). The commit's .gitattributes do not
// apply (a bare repository has no work tree to take attributes from):
// export-ignore would leave files out of a session's checkout and
// export-subst would write the repository's refs into them, so the same
// commit would not give the same tree everywhere.
func (s *Service) Archive(ctx context.Context, r *Repo, commit string, w io.Writer) error {
	if err := checkOIDs([]string{commit}); err != nil {
		return err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return err
	}
	defer release()
	if _, err := s.run(ctx, newCommand("archive", "--format=tar", "--worktree-attributes", "--end-of-options").val(commit), runOpts{repo: r, stdout: w}); err != nil {
		return fmt.Errorf("gitsvc: archive %s: %w", commit, err)
	}
	return nil
}
