package models

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm/clause"
)

// Edit session states and close reasons, as stored.
const (
	SessionOpen   = "open"
	SessionEnding = "ending"
	SessionClosed = "closed"
)

// CodeSession is one person's edit session on one project (ADR 0029).
type CodeSession struct {
	ID          string     `json:"id"`
	ProjectID   int64      `json:"projectId"`
	UserID      int64      `json:"userId"`
	BaseCommit  string     `json:"baseCommit"`
	State       string     `json:"state"`
	CloseReason *string    `json:"closeReason,omitempty"`
	OpenedAt    time.Time  `json:"openedAt"`
	LastSeenAt  time.Time  `json:"lastSeenAt"`
	ClosedAt    *time.Time `json:"closedAt,omitempty"`
	// SandboxSlot picks the session's uid within the configured range.
	SandboxSlot *int32 `json:"-"`
}

// SessionFile is one changed path of a session: its content, or a deletion.
type SessionFile struct {
	SessionID string `gorm:"primaryKey"`
	Path      string `gorm:"primaryKey"`
	Content   []byte
	Deleted   bool
	UpdatedAt time.Time
}

// TableName maps SessionFile to code_session_files.
func (SessionFile) TableName() string { return "code_session_files" }

// CreateSession inserts an open session. ErrConflict (constraint
// code_sessions_one_open) when the person already has one on the project.
func (s *Store) CreateSession(ctx context.Context, cs *CodeSession) error {
	if err := s.db.WithContext(ctx).Create(cs).Error; err != nil {
		return fmt.Errorf("models: create session: %w", translate(err))
	}
	return nil
}

// OpenSessionOf returns the person's open session on the project, or
// ErrNotFound.
func (s *Store) OpenSessionOf(ctx context.Context, projectID, userID int64) (*CodeSession, error) {
	var cs CodeSession
	err := s.db.WithContext(ctx).Where("project_id = ? AND user_id = ? AND state = ?", projectID, userID, SessionOpen).Take(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("models: open session of user %d on project %d: %w", userID, projectID, translate(err))
	}
	return &cs, nil
}

// SessionByID returns the session, or ErrNotFound.
func (s *Store) SessionByID(ctx context.Context, id string) (*CodeSession, error) {
	var cs CodeSession
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&cs).Error; err != nil {
		return nil, fmt.Errorf("models: session %s: %w", id, translate(err))
	}
	return &cs, nil
}

// LockSession returns the session with its row locked for the rest of the
// transaction, so that the checks and the change after them are one step.
func (s *Store) LockSession(ctx context.Context, id string) (*CodeSession, error) {
	var cs CodeSession
	err := s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).Take(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("models: lock session %s: %w", id, translate(err))
	}
	return &cs, nil
}

// TouchLiveSession records a request at now on the person's session id and
// returns it with its row locked for the rest of the transaction, in one
// round trip, when it is open and within its limits: seen after idleSince
// and opened after openedSince. Otherwise (missing, someone else's, ended
// or over a limit) it is ErrNotFound and nothing changed; the caller then
// finds out which.
func (s *Store) TouchLiveSession(ctx context.Context, id string, userID, projectID int64, now, idleSince, openedSince time.Time) (*CodeSession, error) {
	var cs []CodeSession
	err := s.db.WithContext(ctx).Model(&cs).Clauses(clause.Returning{}).
		Where("id = ? AND user_id = ? AND project_id = ? AND state = ? AND last_seen_at > ? AND opened_at > ?",
			id, userID, projectID, SessionOpen, idleSince, openedSince).
		UpdateColumn("last_seen_at", now).Error
	if err != nil {
		return nil, fmt.Errorf("models: touch session %s: %w", id, translate(err))
	}
	if len(cs) != 1 {
		return nil, fmt.Errorf("models: touch session %s: %w", id, ErrNotFound)
	}
	return &cs[0], nil
}

// SessionFileAndCount returns the session's edit of path (nil when the
// path is unchanged) and how many paths the session changes, in one round
// trip: a save needs both.
func (s *Store) SessionFileAndCount(ctx context.Context, sessionID, path string) (*SessionFile, int64, error) {
	var row struct {
		Path      *string
		Content   []byte
		Deleted   *bool
		UpdatedAt *time.Time
		Changed   int64
	}
	err := s.db.WithContext(ctx).Raw(`SELECT f.path, f.content, f.deleted, f.updated_at, c.changed
		FROM (SELECT count(*) AS changed FROM code_session_files WHERE session_id = ?) AS c
		LEFT JOIN code_session_files AS f ON f.session_id = ? AND f.path = ?`, sessionID, sessionID, path).
		Scan(&row).Error
	if err != nil {
		return nil, 0, fmt.Errorf("models: edit %s of %s: %w", path, sessionID, translate(err))
	}
	if row.Path == nil {
		return nil, row.Changed, nil
	}
	return &SessionFile{SessionID: sessionID, Path: *row.Path, Content: row.Content, Deleted: *row.Deleted,
		UpdatedAt: *row.UpdatedAt}, row.Changed, nil
}

// TouchSession records a request at now.
func (s *Store) TouchSession(ctx context.Context, id string, now time.Time) error {
	// Never backwards: a shell's activity is written a beat late.
	err := s.db.WithContext(ctx).Model(&CodeSession{}).Where("id = ? AND state = ? AND last_seen_at < ?", id, SessionOpen, now).
		UpdateColumn("last_seen_at", now).Error
	if err != nil {
		return fmt.Errorf("models: touch session %s: %w", id, err)
	}
	return nil
}

// BeginEndSession moves an open session to ending with reason, and says
// whether this call did it (false when it was no longer open).
func (s *Store) BeginEndSession(ctx context.Context, id, reason string) (bool, error) {
	res := s.db.WithContext(ctx).Model(&CodeSession{}).Where("id = ? AND state = ?", id, SessionOpen).
		UpdateColumns(map[string]any{"state": SessionEnding, "close_reason": reason})
	if res.Error != nil {
		return false, fmt.Errorf("models: end session %s: %w", id, translate(res.Error))
	}
	return res.RowsAffected == 1, nil
}

// FinishEndSession deletes the session's edits and marks it closed.
func (s *Store) FinishEndSession(ctx context.Context, id string, at time.Time) error {
	return s.Tx(ctx, func(tx *Store) error {
		if err := tx.db.Where("session_id = ?", id).Delete(&SessionFile{}).Error; err != nil {
			return fmt.Errorf("models: delete edits of %s: %w", id, err)
		}
		err := tx.db.Model(&CodeSession{}).Where("id = ? AND state = ?", id, SessionEnding).
			UpdateColumns(map[string]any{"state": SessionClosed, "closed_at": at}).Error
		if err != nil {
			return fmt.Errorf("models: close session %s: %w", id, translate(err))
		}
		return nil
	})
}

// OverdueSessions lists sessions to end: open ones of active projects idle
// since before idleBefore or opened before openedBefore, and ending ones
// whose cleanup was interrupted. Sessions of an archived project are
// paused: no limit ends them until it is unarchived (ResumeSessions).
func (s *Store) OverdueSessions(ctx context.Context, idleBefore, openedBefore time.Time) ([]CodeSession, error) {
	var css []CodeSession
	err := s.db.WithContext(ctx).Table("code_sessions").Select("code_sessions.*").
		Joins("JOIN projects ON projects.id = code_sessions.project_id").
		Where("code_sessions.state = ?", SessionEnding).
		Or("code_sessions.state = ? AND projects.status = ? AND (code_sessions.last_seen_at < ? OR code_sessions.opened_at < ?)",
			SessionOpen, StatusActive, idleBefore, openedBefore).
		Order("code_sessions.opened_at").Scan(&css).Error
	if err != nil {
		return nil, fmt.Errorf("models: overdue sessions: %w", err)
	}
	return css, nil
}

// UnfinishedSessionsOf lists the open and ending sessions of a project.
func (s *Store) UnfinishedSessionsOf(ctx context.Context, projectID int64) ([]CodeSession, error) {
	var css []CodeSession
	err := s.db.WithContext(ctx).Where("project_id = ? AND state <> ?", projectID, SessionClosed).Find(&css).Error
	if err != nil {
		return nil, fmt.Errorf("models: sessions of project %d: %w", projectID, err)
	}
	return css, nil
}

// OpenSessionsOfMember lists userID's open sessions on the project.
func (s *Store) OpenSessionsOfMember(ctx context.Context, projectID, userID int64) ([]CodeSession, error) {
	var css []CodeSession
	err := s.db.WithContext(ctx).Where("project_id = ? AND user_id = ? AND state = ?", projectID, userID, SessionOpen).Find(&css).Error
	if err != nil {
		return nil, fmt.Errorf("models: sessions of user %d on project %d: %w", userID, projectID, err)
	}
	return css, nil
}

// OpenSessionsOfUser lists userID's open sessions on every project.
func (s *Store) OpenSessionsOfUser(ctx context.Context, userID int64) ([]CodeSession, error) {
	var css []CodeSession
	err := s.db.WithContext(ctx).Where("user_id = ? AND state = ?", userID, SessionOpen).Find(&css).Error
	if err != nil {
		return nil, fmt.Errorf("models: sessions of user %d: %w", userID, err)
	}
	return css, nil
}

// ResumeSessions restarts the clocks of the project's open sessions when
// it is unarchived after being archived since pausedSince: each keeps the
// age it had left (its opening moves forward by the time it was paused)
// and counts as active now.
func (s *Store) ResumeSessions(ctx context.Context, projectID int64, pausedSince, now time.Time) error {
	err := s.db.WithContext(ctx).Exec(`UPDATE code_sessions
		SET opened_at = opened_at + GREATEST(CAST(? AS timestamptz) - CAST(? AS timestamptz), interval '0'), last_seen_at = ?
		WHERE project_id = ? AND state = ?`, now, pausedSince, now, projectID, SessionOpen).Error
	if err != nil {
		return fmt.Errorf("models: resume sessions of project %d: %w", projectID, translate(err))
	}
	return nil
}

// SessionFiles returns every changed path of the session, by path.
func (s *Store) SessionFiles(ctx context.Context, sessionID string) ([]SessionFile, error) {
	var fs []SessionFile
	if err := s.db.WithContext(ctx).Where("session_id = ?", sessionID).Order("path").Find(&fs).Error; err != nil {
		return nil, fmt.Errorf("models: edits of %s: %w", sessionID, err)
	}
	return fs, nil
}

// SessionFile returns one changed path, or ErrNotFound when unchanged.
func (s *Store) SessionFile(ctx context.Context, sessionID, path string) (*SessionFile, error) {
	var f SessionFile
	if err := s.db.WithContext(ctx).Where("session_id = ? AND path = ?", sessionID, path).Take(&f).Error; err != nil {
		return nil, fmt.Errorf("models: edit %s of %s: %w", path, sessionID, translate(err))
	}
	return &f, nil
}

// PutSessionFile stores a changed path (content or deletion).
func (s *Store) PutSessionFile(ctx context.Context, f *SessionFile) error {
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "session_id"}, {Name: "path"}},
		DoUpdates: clause.AssignmentColumns([]string{"content", "deleted", "updated_at"}),
	}).Create(f).Error
	if err != nil {
		return fmt.Errorf("models: save edit %s of %s: %w", f.Path, f.SessionID, translate(err))
	}
	return nil
}

// DeleteSessionFile forgets a changed path: it reads as the base again.
func (s *Store) DeleteSessionFile(ctx context.Context, sessionID, path string) error {
	err := s.db.WithContext(ctx).Where("session_id = ? AND path = ?", sessionID, path).Delete(&SessionFile{}).Error
	if err != nil {
		return fmt.Errorf("models: forget edit %s of %s: %w", path, sessionID, err)
	}
	return nil
}

// Event is one row of the event log.
type Event struct {
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	ProjectID *int64          `json:"projectId,omitempty"`
	ActorID   *int64          `json:"actorId,omitempty"`
	Data      json.RawMessage `json:"data" gorm:"type:jsonb"`
	CreatedAt time.Time       `json:"createdAt"`
}

// AddEvent appends to the event log.
func (s *Store) AddEvent(ctx context.Context, e *Event) error {
	if err := s.db.WithContext(ctx).Create(e).Error; err != nil {
		return fmt.Errorf("models: event %s: %w", e.Type, translate(err))
	}
	return nil
}

// EventsOf returns a project's events of the given type, oldest first.
func (s *Store) EventsOf(ctx context.Context, projectID int64, typ string) ([]Event, error) {
	var es []Event
	if err := s.db.WithContext(ctx).Where("project_id = ? AND type = ?", projectID, typ).Order("id").Find(&es).Error; err != nil {
		return nil, fmt.Errorf("models: events: %w", err)
	}
	return es, nil
}

// SessionCommand is one audited command: never its output.
type SessionCommand struct {
	ID         int64     `json:"id"`
	SessionID  string    `json:"-"`
	Command    string    `json:"command"`
	Folder     string    `json:"folder"`
	ExitCode   int       `json:"exitCode"`
	Canceled   bool      `json:"canceled"` // stopped by the session's owner
	DurationMS int64     `json:"durationMs" gorm:"column:duration_ms"`
	StartedAt  time.Time `json:"startedAt"`
}

// TableName maps SessionCommand to code_session_commands.
func (SessionCommand) TableName() string { return "code_session_commands" }

// AddSessionCommand appends to the audit.
func (s *Store) AddSessionCommand(ctx context.Context, c *SessionCommand) error {
	if err := s.db.WithContext(ctx).Create(c).Error; err != nil {
		return fmt.Errorf("models: audit command of %s: %w", c.SessionID, translate(err))
	}
	return nil
}

// SessionCommands returns the session's latest commands, newest first.
func (s *Store) SessionCommands(ctx context.Context, sessionID string, limit int) ([]SessionCommand, error) {
	var cs []SessionCommand
	err := s.db.WithContext(ctx).Where("session_id = ?", sessionID).Order("id DESC").Limit(limit).Find(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("models: commands of %s: %w", sessionID, err)
	}
	return cs, nil
}

// UnfinishedSessions lists every open or ending session.
func (s *Store) UnfinishedSessions(ctx context.Context) ([]CodeSession, error) {
	var css []CodeSession
	if err := s.db.WithContext(ctx).Where("state <> ?", SessionClosed).Find(&css).Error; err != nil {
		return nil, fmt.Errorf("models: unfinished sessions: %w", err)
	}
	return css, nil
}

// OpenSessionIDs answers which of ids name open sessions.
func (s *Store) OpenSessionIDs(ctx context.Context, ids []string) (map[string]bool, error) {
	open := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return open, nil
	}
	var found []string
	err := s.db.WithContext(ctx).Model(&CodeSession{}).Where("id IN ? AND state = ?", ids, SessionOpen).Pluck("id", &found).Error
	if err != nil {
		return nil, fmt.Errorf("models: open sessions among %d: %w", len(ids), err)
	}
	for _, id := range found {
		open[id] = true
	}
	return open, nil
}
