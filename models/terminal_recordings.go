package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The states of a terminal recording.
const (
	RecordingRunning = "recording"
	RecordingSaved   = "saved"
	RecordingFailed  = "failed"
)

// TerminalRecording is one recording of a terminal: its row, and where its
// asciicast file is once saved.
type TerminalRecording struct {
	ID         int64      `json:"id"`
	ProjectID  int64      `json:"projectId"`
	UserID     int64      `json:"-"`
	SessionID  string     `json:"sessionId"`
	TerminalID string     `json:"terminalId"`
	State      string     `json:"state"`
	StartedAt  time.Time  `json:"startedAt"`
	EndedAt    *time.Time `json:"endedAt,omitempty"`
	Bytes      int64      `json:"bytes"`
	Truncated  bool       `json:"truncated"`
	Shared     bool       `json:"shared"`
	ObjectKey  *string    `json:"-"`
	Owner      string     `json:"owner" gorm:"->"` // the owner's username, when a query joins it
}

// ErrTooManyRecordings: the person keeps as many recordings as they may.
var ErrTooManyRecordings = errors.New("models: too many recordings")

// StartRecording records that rec's terminal is being recorded and sets
// rec.ID, unless its owner already keeps max recordings
// (ErrTooManyRecordings); the owner's row stays locked until it is written,
// so two starts at once cannot both take the last place. ErrConflict: that
// terminal is being recorded already.
func (s *Store) StartRecording(ctx context.Context, rec *TerminalRecording, max int) error {
	rec.State = RecordingRunning
	err := s.Tx(ctx, func(tx *Store) error {
		db := tx.db.WithContext(ctx)
		var locked []int64
		if err := db.Raw(`SELECT id FROM users WHERE id = ? FOR NO KEY UPDATE`, rec.UserID).Scan(&locked).Error; err != nil {
			return err
		}
		if len(locked) == 0 {
			return ErrNotFound
		}
		var n int
		if err := db.Raw(`SELECT count(*) FROM terminal_recordings WHERE user_id = ?`, rec.UserID).Scan(&n).Error; err != nil {
			return err
		}
		if n >= max {
			return ErrTooManyRecordings
		}
		return db.Create(rec).Error
	})
	if err != nil {
		return fmt.Errorf("models: start recording terminal %s: %w", rec.TerminalID, translate(err))
	}
	return nil
}

// FinishRecording records how recording id ended: saved under key (state
// saved) with its size, or failed when key is "".
func (s *Store) FinishRecording(ctx context.Context, id int64, key string, bytes int64, truncated bool, at time.Time) error {
	state, object := RecordingSaved, &key
	if key == "" {
		state, object = RecordingFailed, nil
	}
	err := s.db.WithContext(ctx).Exec(`UPDATE terminal_recordings
		SET state = ?, ended_at = ?, object_key = ?, bytes = ?, truncated = ? WHERE id = ? AND state = ?`,
		state, at, object, bytes, truncated, id, RecordingRunning).Error
	if err != nil {
		return fmt.Errorf("models: finish recording %d: %w", id, translate(err))
	}
	return nil
}

// RecordingsOf lists the recordings userID made in a session, newest
// first.
func (s *Store) RecordingsOf(ctx context.Context, sessionID string, userID int64) ([]TerminalRecording, error) {
	var recs []TerminalRecording
	err := s.db.WithContext(ctx).Where("session_id = ? AND user_id = ?", sessionID, userID).
		Order("started_at DESC, id DESC").Find(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("models: recordings of session %s: %w", sessionID, translate(err))
	}
	return recs, nil
}

// SharedRecordings lists the saved recordings shared with a project, with
// their owners' names, newest first.
func (s *Store) SharedRecordings(ctx context.Context, projectID int64) ([]TerminalRecording, error) {
	var recs []TerminalRecording
	err := s.db.WithContext(ctx).Raw(`SELECT r.*, u.username AS owner FROM terminal_recordings r
		JOIN users u ON u.id = r.user_id WHERE r.project_id = ? AND r.shared AND r.state = ?
		ORDER BY r.started_at DESC, r.id DESC`, projectID, RecordingSaved).Scan(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("models: shared recordings of project %d: %w", projectID, translate(err))
	}
	return recs, nil
}

// Recording returns recording id of a project, with its owner's name.
// ErrNotFound: there is none.
func (s *Store) Recording(ctx context.Context, projectID, id int64) (*TerminalRecording, error) {
	var recs []TerminalRecording
	err := s.db.WithContext(ctx).Raw(`SELECT r.*, u.username AS owner FROM terminal_recordings r
		JOIN users u ON u.id = r.user_id WHERE r.project_id = ? AND r.id = ?`, projectID, id).Scan(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("models: recording %d: %w", id, translate(err))
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("models: recording %d: %w", id, ErrNotFound)
	}
	return &recs[0], nil
}

// ShareRecording shares a saved recording of userID's with its project, or
// stops sharing it. ErrNotFound: userID has no such saved recording.
func (s *Store) ShareRecording(ctx context.Context, id, userID int64, shared bool) error {
	res := s.db.WithContext(ctx).Exec(`UPDATE terminal_recordings SET shared = ? WHERE id = ? AND user_id = ? AND state = ?`,
		shared, id, userID, RecordingSaved)
	if res.Error != nil {
		return fmt.Errorf("models: share recording %d: %w", id, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: share recording %d: %w", id, ErrNotFound)
	}
	return nil
}

// DeleteRecording deletes a finished recording of userID's; its object is
// listed for the collector to delete (a trigger does it, whatever deletes
// the row). ErrNotFound: userID has no such finished recording.
func (s *Store) DeleteRecording(ctx context.Context, id, userID int64) error {
	res := s.db.WithContext(ctx).Exec(`DELETE FROM terminal_recordings WHERE id = ? AND user_id = ? AND state <> ?`,
		id, userID, RecordingRunning)
	if res.Error != nil {
		return fmt.Errorf("models: delete recording %d: %w", id, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: delete recording %d: %w", id, ErrNotFound)
	}
	return nil
}
