package changes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"atelier/editsession"
	"atelier/events"
	"atelier/fault"
	"atelier/models"
	"atelier/projects"
)

// maxCommands is how much of a session's audit a Change carries.
const maxCommands = 1000

// Submit turns the caller's open session into one Change and ends the
// session. A repeat (double click, retry, another tab) finds the same
// Change: created says whether this call made it. The commit is composed
// from the edits as read with no lock held; then one short transaction
// locks the session's row, finds the edits still the same, records the
// Change and begins the session's end, so no git call waits inside it and
// no save slips in between. Concurrent submits of one session queue on
// canonical's write reservation, and a unique index backs that.
func (s *Service) Submit(ctx context.Context, acc *projects.Access, sessionID, message string) (*models.Change, bool, error) {
	message = strings.TrimSpace(message)
	if utf8.RuneCountInString(message) > 10000 {
		return nil, false, ErrBadMessage
	}
	sess, err := s.edits.Get(ctx, acc, sessionID, true)
	if err != nil {
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
	for try := 1; ; try++ {
		ch, cs, created, err = s.submit(ctx, acc, sess, message, try)
		if !errors.Is(err, ErrEditsChanging) || try == submitTries {
			break
		}
	}
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
	s.queued()
	return ch, true, nil
}

// submitTries is how many times a submit composes the edits again when
// they changed while it composed them (the editor saving as the person
// clicks Submit) before it gives up with ErrEditsChanging.
const submitTries = 3

// ErrEditsChanging: the session's edits changed between their reading and
// the recording of the Change composed from them, every time.
var ErrEditsChanging = fault.New(fault.Conflict, "edits_changing", "changes: the session's files changed while it was submitted",
	"The session's files changed while it was submitted; submit again.")

// submit is Submit's try: the edits read under canonical's reservation,
// composed, and recorded with the session's end begun, in one short
// transaction that holds the session's row, if they are still the same;
// else ErrEditsChanging. cs is the session's row as it was locked. Each
// try's commit has a ref of its own: git never moves a ref to a commit
// that does not contain its tip.
func (s *Service) submit(ctx context.Context, acc *projects.Access, sess *editsession.Session, message string, try int) (ch *models.Change, cs *models.CodeSession, created bool, err error) {
	id := sess.ID
	key := strings.TrimPrefix(id, "edit_")
	if try > 1 {
		key += "-" + strconv.Itoa(try)
	}
	var read []models.SessionFileVersion
	ch, created, err = s.recordHumanChange(ctx, humanChange{project: acc.Project, author: acc.User, sessionID: id,
		key: key, base: sess.BaseCommit, message: message,
		edits: func(ctx context.Context) ([]Edit, []models.SessionCommand, *models.Change, error) {
			// Under the reservation: a submit that got it first has
			// recorded its Change.
			if existing, err := s.db.ChangeOfSession(ctx, id); err == nil {
				return nil, nil, existing, nil
			} else if !errors.Is(err, models.ErrNotFound) {
				return nil, nil, nil, err
			}
			files, err := s.db.SessionFiles(ctx, id)
			if err != nil {
				return nil, nil, nil, err
			}
			commands, err := s.db.SessionCommands(ctx, id, maxCommands)
			if err != nil {
				return nil, nil, nil, err
			}
			edits := make([]Edit, len(files))
			read = make([]models.SessionFileVersion, len(files))
			for i, f := range files {
				edits[i] = Edit{Path: f.Path, Content: f.Content, Deleted: f.Deleted}
				read[i] = sumOf(f)
			}
			return edits, commands, nil, nil
		},
		record: func(ctx context.Context, ch *models.Change, set *models.ChangeSet) error {
			return s.db.Tx(ctx, func(tx *models.Store) error {
				// The session stops taking edits in the same step as the
				// Change is recorded, so no save slips in after it; if
				// one came while the commit was composed, all of it
				// rolls back and the submit composes again.
				locked, err := s.edits.Seal(ctx, tx, acc, id)
				if err != nil {
					return err
				}
				now, err := tx.SessionFileVersions(ctx, id)
				if err != nil {
					return err
				}
				if !slices.EqualFunc(read, now, sameSum) {
					return ErrEditsChanging
				}
				if err := tx.CreateChange(ctx, ch, set); err != nil {
					return err
				}
				cs = locked
				return nil
			})
		}})
	return ch, cs, created, err
}

// sumOf is f as SessionFileVersions gives it.
func sumOf(f models.SessionFile) models.SessionFileVersion {
	if f.Deleted {
		return models.SessionFileVersion{Path: f.Path, Deleted: true}
	}
	sum := sha256.Sum256(f.Content)
	return models.SessionFileVersion{Path: f.Path, SHA256: sum[:]}
}

func sameSum(a, b models.SessionFileVersion) bool {
	return a.Path == b.Path && a.Deleted == b.Deleted && bytes.Equal(a.SHA256, b.SHA256)
}

// EditFile saves one file of canonical as a one-file Change, for owners'
// and admins' scripts: base is the commit the file was read from.
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
	ch, _, err := s.recordHumanChange(ctx, humanChange{project: acc.Project, author: acc.User, base: base, message: message,
		edits: func(context.Context) ([]Edit, []models.SessionCommand, *models.Change, error) {
			return []Edit{{Path: path, Content: content}}, nil, nil, nil
		},
		record: s.db.CreateChange})
	if err != nil {
		return nil, err
	}
	s.record(ctx, events.ChangeComposed, ch, acc.User.ID, nil)
	s.queued()
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
// editsession, the one owner of a session's life, does both in one
// transaction; the rule of what is left behind is this package's.
func (s *Service) Rebase(ctx context.Context, acc *projects.Access, sessionID string) (*editsession.Session, []string, error) {
	return s.edits.Rebase(ctx, acc, sessionID, overlapping)
}
