package models

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// OpenSessionRow is an open edit session with the names a site admin
// reads and the paths it changes.
type OpenSessionRow struct {
	ID         string
	ProjectID  int64
	Project    string
	UserID     int64
	Username   string
	OpenedAt   time.Time
	LastSeenAt time.Time
	Paths      []string `gorm:"-"`
	PathsJSON  string
}

// OpenSessions lists every open session, oldest first, with its changed
// paths in order.
func (s *Store) OpenSessions(ctx context.Context) ([]OpenSessionRow, error) {
	var rows []OpenSessionRow
	// The paths travel as JSON: a path may hold any character but NUL,
	// newlines and commas included.
	err := s.db.WithContext(ctx).Raw(`SELECT s.id, s.project_id, p.name AS project, s.user_id, u.username,
			s.opened_at, s.last_seen_at,
			COALESCE((SELECT json_agg(f.path ORDER BY f.path) FROM code_session_files AS f WHERE f.session_id = s.id), '[]') AS paths_json
		FROM code_sessions AS s
		JOIN projects AS p ON p.id = s.project_id
		JOIN users AS u ON u.id = s.user_id
		WHERE s.state = ?
		ORDER BY s.opened_at, s.id`, SessionOpen).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("models: open sessions: %w", err)
	}
	for i := range rows {
		if err := json.Unmarshal([]byte(rows[i].PathsJSON), &rows[i].Paths); err != nil {
			return nil, fmt.Errorf("models: open sessions: paths of %s: %w", rows[i].ID, err)
		}
	}
	return rows, nil
}

// LiveTerminalRow is a live shell lease with the names a site admin reads.
type LiveTerminalRow struct {
	ID          string
	SessionID   string
	ProjectID   int64
	Project     string
	UserID      int64
	Username    string
	Instance    string
	OpenedAt    time.Time
	HeartbeatAt time.Time
}

// LiveTerminals lists the live shell leases of every instance, oldest
// first.
func (s *Store) LiveTerminals(ctx context.Context) ([]LiveTerminalRow, error) {
	var rows []LiveTerminalRow
	err := s.db.WithContext(ctx).Raw(`SELECT t.id, t.session_id, s.project_id, p.name AS project, t.user_id, u.username,
			t.instance, t.opened_at, t.heartbeat_at
		FROM terminals AS t
		JOIN code_sessions AS s ON s.id = t.session_id
		JOIN projects AS p ON p.id = s.project_id
		JOIN users AS u ON u.id = t.user_id
		WHERE t.state = ?
		ORDER BY t.opened_at, t.id`, TerminalLive).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("models: live terminals: %w", err)
	}
	return rows, nil
}

// AuditedCommand is a command from the audit: what ran, where and how it
// ended. The audit never keeps output.
type AuditedCommand struct {
	ID         int64     `json:"id"`
	SessionID  string    `json:"sessionId"`
	ProjectID  int64     `json:"projectId"`
	Project    string    `json:"project"`
	Username   string    `json:"username"`
	Command    string    `json:"command"`
	Folder     string    `json:"folder"`
	ExitCode   int       `json:"exitCode"`
	DurationMS int64     `json:"durationMs" gorm:"column:duration_ms"`
	StartedAt  time.Time `json:"startedAt"`
}

// RecentCommands lists the latest limit commands of every session, newest
// first.
func (s *Store) RecentCommands(ctx context.Context, limit int) ([]AuditedCommand, error) {
	var cs []AuditedCommand
	err := s.db.WithContext(ctx).Raw(`SELECT c.id, c.session_id, s.project_id, p.name AS project, u.username,
			c.command, c.folder, c.exit_code, c.duration_ms, c.started_at
		FROM code_session_commands AS c
		JOIN code_sessions AS s ON s.id = c.session_id
		JOIN projects AS p ON p.id = s.project_id
		JOIN users AS u ON u.id = s.user_id
		ORDER BY c.id DESC
		LIMIT ?`, limit).Scan(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("models: recent commands: %w", err)
	}
	return cs, nil
}

// NamedEvent is an event with the names of its project, its actor and,
// for a session's event, the session's owner, when they still exist.
type NamedEvent struct {
	Event
	Project *string
	Actor   *string
	Owner   *string
}

// namedEvents selects events with their names. An event that keeps its
// project in its data rather than in project_id (an import: see
// code.countImport) is named by that one.
const namedEvents = `SELECT e.id, e.type, e.project_id, e.actor_id, e.data, e.created_at,
		p.name AS project, u.username AS actor, o.username AS owner
	FROM events AS e
	LEFT JOIN projects AS p ON p.id = COALESCE(e.project_id,
		CASE WHEN e.data->>'project' ~ '^[0-9]{1,18}$' THEN (e.data->>'project')::bigint END)
	LEFT JOIN users AS u ON u.id = e.actor_id
	LEFT JOIN code_sessions AS cs ON cs.id = e.data->>'session'
	LEFT JOIN users AS o ON o.id = cs.user_id`

// RecentEvents lists the latest limit events, newest first.
func (s *Store) RecentEvents(ctx context.Context, limit int) ([]NamedEvent, error) {
	var es []NamedEvent
	err := s.db.WithContext(ctx).Raw(namedEvents+`
		ORDER BY e.id DESC
		LIMIT ?`, limit).Scan(&es).Error
	if err != nil {
		return nil, fmt.Errorf("models: recent events: %w", err)
	}
	return es, nil
}
