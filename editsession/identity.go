package editsession

import (
	"context"
	"time"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage/codestore"
)

// What runs for a session (its checkout, commands, captures and shells)
// lives in another package and sees a session through this file alone:
// which session it is and whose, its project and the base its checkout
// starts from, and its edits, read and written here under the session's
// rules.

// Identity is a session as what runs for it knows it.
type Identity struct {
	ID        string
	ProjectID int64
	UserID    int64 // the session's owner
	// SandboxSlot is the session's place in the block of sandbox users;
	// nil for a session opened before sessions had one.
	SandboxSlot *int32
	Project     *models.Project
	// Source is the session's fork at its base commit (Source.Commit).
	Source codestore.Source
}

// Identity is the session as what runs for it knows it.
func (s *Session) Identity() Identity {
	return Identity{ID: s.ID, ProjectID: s.ProjectID, UserID: s.UserID, SandboxSlot: s.SandboxSlot,
		Project: s.Project, Source: s.Source}
}

// Editable refuses any change to a paused session (its project is
// archived), as editable does for the session's own files.
func (id Identity) Editable() error { return editable(&Session{Project: id.Project}) }

// row is as much of the session's row as inSession checks.
func (id Identity) row() *Session {
	return &Session{CodeSession: &models.CodeSession{ID: id.ID, UserID: id.UserID, ProjectID: id.ProjectID},
		Project: id.Project, Source: id.Source}
}

// Edits are the sessions' edits as what runs for a session reads and
// records them. It has no part in a session's life, so it is built before
// the Sessions whose Cleaners use it.
type Edits struct {
	db   *models.Store
	git  *gitsvc.Service
	code *codestore.Store
	now  func() time.Time
}

// NewEdits returns the sessions' edits kept in db, with their forks in git
// and their base read through code.
func NewEdits(db *models.Store, git *gitsvc.Service, code *codestore.Store, now func() time.Time) *Edits {
	return &Edits{db: db, git: git, code: code, now: now}
}

// EditVersions lists the session's changed paths with the digests of
// their edits, without their contents.
func (s *Edits) EditVersions(ctx context.Context, sessionID string) ([]models.SessionFileVersion, error) {
	return s.db.SessionFileVersions(ctx, sessionID)
}

// Edit is the session's edit of path, or models.ErrNotFound when the path
// is unchanged.
func (s *Edits) Edit(ctx context.Context, sessionID, path string) (*models.SessionFile, error) {
	return s.db.SessionFile(ctx, sessionID, path)
}

// BaseFile reads path at the session's base commit, as far as a file may
// be long and one byte more; exists is false when the base has no file
// there.
func (s *Edits) BaseFile(ctx context.Context, id Identity, path string) (content []byte, exists bool, err error) {
	return baseFile(ctx, s.code, id.row().Source, path)
}

// Touch records activity in the session at at, such as a key typed in one
// of its shells.
func (s *Edits) Touch(ctx context.Context, sessionID string, at time.Time) error {
	return s.db.TouchSession(ctx, sessionID, at)
}

// Captured is what a command or a shell left at one path of a session's
// checkout: new content, a deletion, or (Forget) the base's own file
// again, which drops the edit.
type Captured struct {
	Path    string
	Content []byte
	Deleted bool
	Forget  bool
}

// RecordCaptured writes what a capture found as the session's edits in one
// short transaction, which holds the session's row (inSession) and checks
// its path limit against what the database has: the editor may have added
// paths meanwhile. refused are the new paths that found no room; nothing
// is written for them.
func (s *Edits) RecordCaptured(ctx context.Context, id Identity, edits []Captured) (refused map[string]bool, err error) {
	refused = map[string]bool{}
	err = inSession(ctx, s.db, id.row(), func(tx *models.Store) error {
		paths, err := tx.SessionPaths(ctx, id.ID)
		if err != nil {
			return err
		}
		had := make(map[string]bool, len(paths))
		for _, sp := range paths {
			had[sp.Path] = true
		}
		count := len(paths)
		now := s.now()
		for _, c := range edits {
			switch {
			case c.Forget:
				if had[c.Path] {
					if err := tx.DeleteSessionFile(ctx, id.ID, c.Path); err != nil {
						return err
					}
					delete(had, c.Path)
					count--
				}
				continue
			case !had[c.Path] && count >= MaxPaths:
				refused[c.Path] = true
				continue
			case !had[c.Path]:
				had[c.Path] = true
				count++
			}
			edit := &models.SessionFile{SessionID: id.ID, Path: c.Path, Deleted: c.Deleted, UpdatedAt: now}
			if !c.Deleted {
				edit.Content = nonNil(c.Content)
			}
			if err := tx.PutSessionFile(ctx, edit); err != nil {
				return err
			}
		}
		return nil
	})
	return refused, err
}
