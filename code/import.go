package code

import (
	"context"
	"errors"
	"fmt"
	"io"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
)

var (
	// ErrNothingToImport is an import with neither an archive nor a source.
	ErrNothingToImport = fault.New(fault.BadInput, "nothing_to_import", "code: send an archive (.tar.gz or .zip) or a git source to import", "Send an archive (.tar.gz or .zip) or a git source to import.")
	// ErrSourceFailed is a git source that could not be fetched.
	ErrSourceFailed = fault.New(fault.Upstream, "source_failed", "code: the git source could not be fetched", "The git source could not be fetched.")
)

// ImportInput is an uploaded archive or a git source to clone.
type ImportInput struct {
	Archive  io.ReaderAt
	Size     int64
	Filename string
	Source   string // a git URL, or a server-local repository (site admins)
}

// Import makes one commit on canonical from an archive (its files become
// the tree) or from a git source (its HEAD's tree, with the source's history
// kept as a second parent), then publishes it.
func (s *Service) Import(ctx context.Context, acc *projects.Access, in ImportInput) (string, error) {
	p := acc.Project
	if p.WorkspaceMode == models.ModeLocal {
		return "", ErrLocalProject
	}
	if p.Archived() {
		return "", projects.ErrArchived
	}
	repo, err := s.git.OpenBare(projects.CanonicalName(p.ID))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoCanonical, err)
	}

	var commitOnto func(ctx context.Context, parent string) (string, error)
	switch {
	case in.Archive != nil:
		// Reading the archive into git is the slow part; it runs before
		// the project is locked, and nothing refers to its objects until
		// the commit below.
		tree, err := s.writeArchiveTree(ctx, repo, in.Archive, in.Size)
		if err != nil {
			return "", err
		}
		commitOnto = func(ctx context.Context, parent string) (string, error) {
			return s.git.CommitWithParents(ctx, repo, tree, []string{parent}, "Import "+in.Filename)
		}
	case in.Source != "":
		sourceHead, err := s.git.FetchInto(ctx, repo, in.Source, acc.User.IsAdmin)
		var gitErr *gitsvc.GitError
		if errors.As(err, &gitErr) || errors.Is(err, gitsvc.ErrUnreachable) {
			// git's own words and a resolver's name servers are not for the
			// person; they get the sanitized source, the log the exit status.
			if gitErr != nil {
				s.log.Warn("import fetch failed", "project", p.ID, "source", gitsvc.SanitizeURL(in.Source), "exit", gitErr.ExitCode)
			} else {
				s.log.Warn("import fetch failed", "project", p.ID, "err", err)
			}
			return "", fault.Detailf(ErrSourceFailed, ": %s", gitsvc.SanitizeURL(in.Source))
		}
		if err != nil {
			return "", err
		}
		tree, err := s.git.ResolveTree(ctx, repo, sourceHead)
		if err != nil {
			return "", err
		}
		commitOnto = func(ctx context.Context, parent string) (string, error) {
			return s.git.CommitWithParents(ctx, repo, tree, []string{parent, sourceHead}, "Import from "+gitsvc.SanitizeURL(in.Source))
		}
	default:
		return "", ErrNothingToImport
	}

	var commit string
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, p.ID); err != nil {
			return err
		}
		// The repository stays locked from reading its head to recording the
		// new commit, so no other writer slips in between.
		ctx, release, err := s.git.Hold(ctx, repo.GitDir, true)
		if err != nil {
			return err
		}
		defer release()
		// The repository's head is the parent, so a row that lags behind
		// after a crash catches up here instead of wedging every import.
		parent, _, err := s.git.Head(ctx, repo)
		if err != nil {
			return err
		}
		if commit, err = commitOnto(ctx, parent); err != nil {
			return err
		}
		return tx.SetCanonicalCommit(ctx, p.ID, commit)
	})
	if err != nil {
		return "", err
	}
	s.log.Info("code imported", "project", p.ID, "commit", commit, "by", acc.User.Username)
	if _, err := s.store.Publish(ctx, repo, commit); err != nil {
		// Reads fall back to git until a later publish succeeds.
		s.log.Warn("imported commit not published", "project", p.ID, "commit", commit, "err", err)
	}
	return commit, nil
}
