package code

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"atelier/events"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
	"atelier/workspace"
)

var (
	// ErrNothingToImport is an import with neither an archive nor a source.
	ErrNothingToImport = fault.New(fault.BadInput, "nothing_to_import", "code: send an archive (.tar.gz or .zip) or a git source to import", "Send an archive (.tar.gz or .zip) or a git source to import.")
	// ErrSourceFailed is a git source that could not be fetched.
	ErrSourceFailed = fault.New(fault.Upstream, "source_failed", "code: the git source could not be fetched", "The git source could not be fetched.")
	// ErrImportBusy is an import while the project has one running, or the
	// instance as many as it allows.
	ErrImportBusy = fault.New(fault.Limit, "import_busy", "code: an import is running; try again when it is done", "An import of this project is running, or the server runs as many as it allows; try again when it is done.")
	// ErrBadSourceTree is a git source whose tree holds a path that may
	// not enter a project (workspace.CheckNewPath).
	ErrBadSourceTree = fault.New(fault.BadInput, "bad_source_tree", "code: the source's tree holds a path that may not enter a project", "The repository holds a path Atelier does not take")
	// ErrTooManyImports is an import past a person's hourly bound.
	ErrTooManyImports = fault.New(fault.Limit, "too_many_imports", "code: you started as many imports as an hour allows", "You started as many imports as an hour allows; try again later.")
)

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

// Admission is an import's place, taken before anything of the request's
// body is read: a project that takes no imports, a project or instance
// busy with imports, or a person past their hourly bound is refused
// without an upload being received. Whoever holds it reads what to import
// (an upload waits in a temporary file of the import's own, so the imports
// running at once bound those files too), then calls Import. Release frees
// the place.
type Admission struct {
	acc     *projects.Access
	release func()
}

// Release gives the import's place back; calling it again does nothing.
func (a *Admission) Release() { a.release() }

// Admit takes an import's place in acc's project: it must be a Container
// project that is not archived, with no import running on any instance
// (an advisory lock of the project's, held until Release), this instance
// under ATELIER_IMPORTS_MAX running ones and the person under their
// hourly bound. The place is taken first, so an import refused as busy
// does not use up the hour; the hour is looked at here and counted by
// Import.
func (s *Service) Admit(ctx context.Context, acc *projects.Access) (*Admission, error) {
	p := acc.Project
	if p.WorkspaceMode == models.ModeLocal {
		return nil, ErrLocalProject
	}
	if p.Archived() {
		return nil, projects.ErrArchived
	}
	release, err := s.running.Enter(p.ID)
	if err != nil {
		return nil, err
	}
	// One import of a project at a time, whichever instance runs it: two
	// would each commit onto canonical what the other never saw.
	unlock, err := s.db.HoldImportLock(ctx, p.ID)
	if errors.Is(err, models.ErrLockHeld) {
		err = ErrImportBusy
	}
	if err != nil {
		release()
		return nil, err
	}
	leave := release
	release = func() { unlock(); leave() }
	room, wait, err := s.db.RoomWithin(ctx, events.CodeImported, acc.User.ID, time.Hour, s.limits.PerHour)
	if err == nil && !room {
		err = fault.WithRetryAfter(ErrTooManyImports, max(wait, time.Second))
	}
	if err != nil {
		release()
		return nil, err
	}
	return &Admission{acc: acc, release: release}, nil
}

// Import makes one commit on canonical from an archive (its files become
// the tree) or from a git source (its HEAD's tree, with the source's history
// kept as a second parent), then publishes it.
func (s *Service) Import(ctx context.Context, adm *Admission, in ImportInput) (Imported, error) {
	acc := adm.acc
	p := acc.Project
	if in.Archive == nil && in.Source == "" {
		return Imported{}, ErrNothingToImport
	}
	if err := s.countImport(ctx, acc, in); err != nil {
		return Imported{}, err
	}
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
	var tree string
	switch {
	case in.Archive != nil:
		// Reading the archive into git is the slow part; it runs before
		// the project is locked, and nothing refers to its objects until
		// the commit below. The files are counted as they go in: the
		// first that takes the tree past the project's bound stops it.
		writing, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		var err error
		tree, err = s.writeArchiveTree(writing, repo, in.Archive, in.Size, func(size int64) {
			written.Files++
			written.Bytes += size
			in.report(written)
			if err := s.store.CheckProjectBytes(written.Bytes); err != nil {
				stop(err)
			}
		})
		if cause := context.Cause(writing); err != nil && errors.Is(cause, codestore.ErrProjectTooLarge) {
			err = cause
		}
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
			return "", written, s.fetchFailed(p, in.Source, gitErr, err)
		}
		if err != nil {
			return "", written, err
		}
		if tree, err = s.git.ResolveTree(ctx, repo, sourceHead); err != nil {
			return "", written, err
		}
		if err := s.checkSourceTree(ctx, repo, sourceHead); err != nil {
			return "", written, err
		}
		commitOnto = func(ctx context.Context, parent string) (string, error) {
			return s.git.CommitWithParents(ctx, repo, tree, []string{parent, sourceHead}, "Import from "+gitsvc.SanitizeURL(in.Source))
		}
	default:
		return "", written, ErrNothingToImport
	}
	// The whole tree, links and a git source's files too, before anything
	// refers to it: a tree past the bound is never committed nor stored.
	size, err := s.git.TreeBytes(ctx, repo, tree)
	if err != nil {
		return "", written, err
	}
	if err := s.store.CheckProjectBytes(size); err != nil {
		return "", written, err
	}

	in.report(ImportStep{Phase: PhaseCommitting, Files: written.Files, Bytes: written.Bytes})
	// The repository stays locked from reading its head to recording the
	// new commit, so no other writer slips in between; the transaction
	// that records it holds SQL alone, and takes the project's row after
	// the repository, in the order a release takes them.
	ctx, release, err := s.git.Hold(ctx, repo.GitDir, true)
	if err != nil {
		return "", written, err
	}
	defer release()
	// The repository's head is the parent, so a row that lags behind
	// after a crash (or a failed record below) catches up here instead of
	// wedging every import.
	parent, _, err := s.git.Head(ctx, repo)
	if err != nil {
		return "", written, err
	}
	commit, err := commitOnto(ctx, parent)
	if err != nil {
		return "", written, err
	}
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, p.ID); err != nil {
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

// fetchFailed is the refusal of a source git could not fetch, and its
// line in the log. Both carry the source without its credentials and what
// git said, which is what tells a missing repository from a refused token
// or an unreachable host: bounded, one line, and with the source's
// credentials kept out (GitError.Said). A resolver's failure names the
// server's name servers, so the person gets only the source.
func (s *Service) fetchFailed(p *models.Project, source string, gitErr *gitsvc.GitError, err error) error {
	source = gitsvc.SanitizeURL(source)
	if gitErr == nil {
		s.log.Warn("import fetch failed", "project", p.ID, "source", source, "err", err)
		return fault.Detailf(ErrSourceFailed, ": %s", source)
	}
	said := gitErr.Said()
	s.log.Warn("import fetch failed", "project", p.ID, "source", source, "exit", gitErr.ExitCode, "git", said)
	if said == "" {
		return fault.Detailf(ErrSourceFailed, ": %s", source)
	}
	return fault.Detailf(ErrSourceFailed, ": %s. Git said: %s", source, strings.TrimRight(said, ". "))
}

// checkSourceTree refuses a fetched tree that holds a path an archive's
// entry could not have: git stores any name but NUL and /, and a source's
// history is taken as it is, so its names are checked like every path that
// enters a project. Nothing refers to the fetched objects until the commit.
func (s *Service) checkSourceTree(ctx context.Context, repo *gitsvc.Repo, commit string) error {
	paths, err := s.git.Paths(ctx, repo, commit)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := workspace.CheckNewPath(p); err != nil {
			return fault.Detailf(ErrBadSourceTree, ": %w", err)
		}
	}
	return nil
}

// countImport counts the import against the person's hourly bound, site
// admins included: an import costs the server the same whoever starts it,
// and the operator raises the bound when people need more. Admit looked
// at the bound before the upload was read; this is the count that holds
// when two imports of one person race.
func (s *Service) countImport(ctx context.Context, acc *projects.Access, in ImportInput) error {
	what := in.Filename
	if in.Archive == nil {
		what = gitsvc.SanitizeURL(in.Source)
	}
	// The project goes in the data, not in project_id: deleting the
	// project would take the row with it, and a person could create,
	// import and delete their way past the bound.
	data, _ := json.Marshal(map[string]any{"project": acc.Project.ID, "from": what})
	uid := acc.User.ID
	admitted, wait, err := s.db.AddEventWithin(ctx, &models.Event{Type: events.CodeImported, ActorID: &uid, Data: data},
		time.Hour, s.limits.PerHour)
	if err == nil && !admitted {
		err = fault.WithRetryAfter(ErrTooManyImports, max(wait, time.Second))
	}
	return err
}
