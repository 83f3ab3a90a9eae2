package changes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"atelier/editsession"
	"atelier/events"
	"atelier/models"
	"atelier/projects"
)

// maxCommands is how much of a session's audit a Change carries.
const maxCommands = 1000

// Submit turns the caller's open session into one Change and ends the
// session. A repeat (double click, retry, another tab) finds the same
// Change: created says whether this call made it. Concurrent submits of
// one session queue on the session's row, and a unique index backs that.
func (s *Service) Submit(ctx context.Context, acc *projects.Access, sessionID, message string) (*models.Change, bool, error) {
	message = strings.TrimSpace(message)
	if utf8.RuneCountInString(message) > 10000 {
		return nil, false, ErrBadMessage
	}
	if _, err := s.edits.Get(ctx, acc, sessionID, true); err != nil {
		var gone *editsession.GoneError
		if errors.As(err, &gone) && gone.Reason == editsession.ReasonSubmitted {
			ch, err := s.db.ChangeOfSession(ctx, sessionID)
			return ch, false, err
		}
		return nil, false, err
	}
	var (
		ch      *models.Change
		cs      *models.CodeSession
		created bool
	)
	err := s.db.Tx(ctx, func(tx *models.Store) error {
		locked, err := tx.LockSession(ctx, sessionID)
		if errors.Is(err, models.ErrNotFound) {
			return editsession.ErrNotFound
		}
		if err != nil {
			return err
		}
		if locked.UserID != acc.User.ID || locked.ProjectID != acc.Project.ID {
			return editsession.ErrNotFound
		}
		if existing, err := tx.ChangeOfSession(ctx, sessionID); err == nil {
			ch = existing
			return nil
		} else if !errors.Is(err, models.ErrNotFound) {
			return err
		}
		if locked.State != models.SessionOpen {
			return &editsession.GoneError{Reason: *locked.CloseReason}
		}
		files, err := tx.SessionFiles(ctx, sessionID)
		if err != nil {
			return err
		}
		commands, err := tx.SessionCommands(ctx, sessionID, maxCommands)
		if err != nil {
			return err
		}
		edits := make([]Edit, len(files))
		paths := make([]string, len(files))
		for i, f := range files {
			edits[i] = Edit{Path: f.Path, Content: f.Content, Deleted: f.Deleted}
			paths[i] = f.Path
		}
		if message == "" {
			message = defaultMessage(paths)
		}
		ch, err = s.recordHumanChange(ctx, tx, humanChange{project: acc.Project, author: acc.User, sessionID: sessionID,
			base: locked.BaseCommit, edits: edits, message: message, commands: commands})
		if err != nil {
			return err
		}
		// Ending begins in the same step, so no save slips in after the
		// Change was composed.
		if _, err := tx.BeginEndSession(ctx, sessionID, editsession.ReasonSubmitted); err != nil {
			return err
		}
		cs, created = locked, true
		return nil
	})
	var ce *models.ConstraintError
	if errors.As(err, &ce) && ce.Constraint == "changes_one_per_session" {
		ch, err = s.db.ChangeOfSession(ctx, sessionID)
		return ch, false, err
	}
	if err != nil {
		return nil, false, err
	}
	if !created {
		return ch, false, nil
	}
	// The rest of the end (fork, checkout, edits) may be retried by the
	// sweeper; the Change stands either way.
	if err := s.edits.FinishSubmitted(ctx, cs, acc.User.ID, ch.ID); err != nil {
		s.log.Warn("submitted session not finished; the sweeper will", "session", sessionID, "err", err)
	}
	s.record(ctx, events.ChangeComposed, ch, acc.User.ID, map[string]any{"session": sessionID})
	s.queue(ch.ID)
	return ch, true, nil
}

// EditFile saves one file of canonical as a one-file Change, as the Code
// page's "Edit this file" does for owners and admins: base is the commit
// the person loaded the file from.
func (s *Service) EditFile(ctx context.Context, acc *projects.Access, path string, content []byte, base, message string) (*models.Change, error) {
	message = strings.TrimSpace(message)
	if message == "" {
		message = defaultMessage([]string{path})
	}
	if utf8.RuneCountInString(message) > 10000 {
		return nil, ErrBadMessage
	}
	if len(content) > editsession.MaxFileBytes {
		return nil, editsession.ErrTooLarge
	}
	if strings.IndexByte(string(content), 0) >= 0 {
		return nil, editsession.ErrBinary
	}
	if !isCommit(base) {
		return nil, ErrNoRepository
	}
	var ch *models.Change
	err := s.db.Tx(ctx, func(tx *models.Store) error {
		var err error
		ch, err = s.recordHumanChange(ctx, tx, humanChange{project: acc.Project, author: acc.User, base: base,
			edits: []Edit{{Path: path, Content: content}}, message: message})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.record(ctx, events.ChangeComposed, ch, acc.User.ID, nil)
	s.queue(ch.ID)
	return ch, nil
}

func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// commandsJSON is a session's audit as a ChangeSet keeps it, oldest first.
func commandsJSON(cmds []models.SessionCommand) (json.RawMessage, error) {
	ordered := make([]models.SessionCommand, len(cmds))
	for i, c := range cmds {
		ordered[len(cmds)-1-i] = c // the audit lists newest first
	}
	return json.Marshal(ordered)
}

// Rebase moves the caller's session onto the current canonical: the
// session ends (discarded) and a new one opens on canonical's head with
// every edit of a path canonical did not change since the old base; the
// paths canonical did change are returned, their edits left behind.
func (s *Service) Rebase(ctx context.Context, acc *projects.Access, sessionID string) (*editsession.Session, []string, error) {
	sess, err := s.edits.Get(ctx, acc, sessionID, true)
	if err != nil {
		return nil, nil, err
	}
	files, err := s.db.SessionFiles(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.openCanonical(ctx, acc.Project)
	if err != nil {
		return nil, nil, err
	}
	defer c.closer()
	head, _, err := s.head(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	var clash []string
	if head != sess.BaseCommit {
		changed, err := s.git.ChangedPaths(ctx, c.repo, sess.BaseCommit, head)
		if err != nil {
			return nil, nil, err
		}
		clash = overlapping(paths, changed)
	}
	if err := s.edits.Discard(ctx, sess); err != nil {
		return nil, nil, err
	}
	next, _, err := s.edits.Open(ctx, acc)
	if err != nil {
		return nil, nil, err
	}
	dropped := map[string]bool{}
	for _, p := range clash {
		dropped[p] = true
	}
	for i := range files {
		f := files[i]
		if dropped[f.Path] {
			continue
		}
		f.SessionID, f.UpdatedAt = next.ID, s.now()
		if err := s.db.PutSessionFile(ctx, &f); err != nil {
			return nil, nil, err
		}
	}
	return next, clash, nil
}
