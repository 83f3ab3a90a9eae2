package code

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
)

var (
	// ErrNothingToImport is an import with neither an archive nor a source.
	ErrNothingToImport = fault.New(fault.BadInput, "nothing_to_import", "code: send an archive (.tar.gz or .zip) or a git source to import", "Send an archive (.tar.gz or .zip) or a git source to import.")
	// ErrSourceFailed is a git source that could not be fetched.
	ErrSourceFailed = fault.New(fault.Upstream, "source_failed", "code: the git source could not be fetched", "The git source could not be fetched.")
	// ErrImportBusy is an import while the project has one running, or the
	// instance as many as it allows.
	ErrImportBusy = fault.New(fault.Limit, "import_busy", "code: an import is running; try again when it is done", "An import of this project is running, or the server runs as many as it allows; try again when it is done.")
	// ErrTooManyImports is an import past a person's hourly bound.
	ErrTooManyImports = fault.New(fault.Limit, "too_many_imports", "code: you started as many imports as an hour allows", "You started as many imports as an hour allows; try again later.")
)

// importEvent is the event each admitted import leaves in the log; the
// hourly bound counts them.
const importEvent = "code.import"

// ImportInput is an uploaded archive or a git source to clone.
type ImportInput struct {
	Archive  io.ReaderAt
	Size     int64
	Filename string
	Source   string // a git URL, or a server-local repository (site admins)
	// Progress, when set, hears how far the import has come: after every
	// file written, then once per later phase; one call at a time, though
	// not always from the caller's goroutine.
	Progress func(ImportStep)
}

// Phases of an import, in order.
const (
	PhaseWriting    = "writing"    // the archive's files go into git
	PhaseFetching   = "fetching"   // a git source is fetched
	PhaseCommitting = "committing" // the commit is made on canonical
	PhasePublishing = "publishing" // its tree goes to the object store
)

// ImportStep is how far an import has come.
type ImportStep struct {
	Phase string `json:"phase"`
	Files int    `json:"files"` // files written so far (archives)
	Bytes int64  `json:"bytes"` // their content's bytes
}

// Imported is what an import made: its commit and the files of its tree.
type Imported struct {
	Commit string `json:"commit"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes,omitempty"` // the files' bytes, known for archives
}

func (in ImportInput) report(st ImportStep) {
	if in.Progress != nil {
		in.Progress(st)
	}
}

// Import makes one commit on canonical from an archive (its files become
// the tree) or from a git source (its HEAD's tree, with the source's history
// kept as a second parent), then publishes it.
func (s *Service) Import(ctx context.Context, acc *projects.Access, in ImportInput) (Imported, error) {
	p := acc.Project
	if p.WorkspaceMode == models.ModeLocal {
		return Imported{}, ErrLocalProject
	}
	if p.Archived() {
		return Imported{}, projects.ErrArchived
	}
	if in.Archive == nil && in.Source == "" {
		return Imported{}, ErrNothingToImport
	}
	release, err := s.admitImport(ctx, acc, in)
	if err != nil {
		return Imported{}, err
	}
	defer release()
	repo, err := s.git.OpenBare(projects.CanonicalName(p.ID))
	if err != nil {
		return Imported{}, fmt.Errorf("%w: %w", ErrNoCanonical, err)
	}
	commit, written, err := s.importInto(ctx, acc, repo, in)
	if err != nil {
		return Imported{}, err
	}
	in.report(ImportStep{Phase: PhasePublishing, Files: written.Files, Bytes: written.Bytes})
	if _, err := s.store.Publish(ctx, repo, commit); err != nil {
		// Reads fall back to git until a later publish succeeds.
		s.log.Warn("imported commit not published", "project", p.ID, "commit", commit, "err", err)
	}
	done := Imported{Commit: commit, Files: written.Files, Bytes: written.Bytes}
	if in.Archive == nil {
		// A git source's files were never counted: its tree's index knows.
		if ix, err := s.store.Index(ctx, codestore.Source{Repo: repo, Commit: commit}); err == nil {
			done.Files = ix.Len()
		}
	}
	return done, nil
}

// importInto writes the archive or fetches the source, then commits it on
// canonical; it returns the commit and what was written.
func (s *Service) importInto(ctx context.Context, acc *projects.Access, repo *gitsvc.Repo, in ImportInput) (string, ImportStep, error) {
	p := acc.Project
	written := ImportStep{Phase: PhaseWriting}
	if in.Archive == nil {
		written.Phase = PhaseFetching
	}
	in.report(written)

	var commitOnto func(ctx context.Context, parent string) (string, error)
	switch {
	case in.Archive != nil:
		// Reading the archive into git is the slow part; it runs before
		// the project is locked, and nothing refers to its objects until
		// the commit below.
		tree, err := s.writeArchiveTree(ctx, repo, in.Archive, in.Size, func(size int64) {
			written.Files++
			written.Bytes += size
			in.report(written)
		})
		if err != nil {
			return "", written, err
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
			return "", written, fault.Detailf(ErrSourceFailed, ": %s", gitsvc.SanitizeURL(in.Source))
		}
		if err != nil {
			return "", written, err
		}
		tree, err := s.git.ResolveTree(ctx, repo, sourceHead)
		if err != nil {
			return "", written, err
		}
		commitOnto = func(ctx context.Context, parent string) (string, error) {
			return s.git.CommitWithParents(ctx, repo, tree, []string{parent, sourceHead}, "Import from "+gitsvc.SanitizeURL(in.Source))
		}
	default:
		return "", written, ErrNothingToImport
	}

	in.report(ImportStep{Phase: PhaseCommitting, Files: written.Files, Bytes: written.Bytes})
	var commit string
	err := s.db.Tx(ctx, func(tx *models.Store) error {
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
		return "", written, err
	}
	s.log.Info("code imported", "project", p.ID, "commit", commit, "by", acc.User.Username)
	return commit, written, nil
}

// admitImport takes the project's import place and counts the import
// against the person's hourly bound, site admins included: an import
// costs the server the same whoever starts it, and the operator raises the
// bound when people need more. The place is taken first, so an import
// refused as busy does not use up the hour.
func (s *Service) admitImport(ctx context.Context, acc *projects.Access, in ImportInput) (release func(), err error) {
	release, err = s.running.Enter(acc.Project.ID)
	if err != nil {
		return nil, err
	}
	what := in.Filename
	if in.Archive == nil {
		what = gitsvc.SanitizeURL(in.Source)
	}
	// The project goes in the data, not in project_id: deleting the
	// project would take the row with it, and a person could create,
	// import and delete their way past the bound.
	data, _ := json.Marshal(map[string]any{"project": acc.Project.ID, "from": what})
	uid := acc.User.ID
	admitted, wait, err := s.db.AddEventWithin(ctx, &models.Event{Type: importEvent, ActorID: &uid, Data: data},
		time.Hour, s.limits.PerHour)
	if err == nil && !admitted {
		err = fault.WithRetryAfter(ErrTooManyImports, max(wait, time.Second))
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}
