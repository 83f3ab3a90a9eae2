package models

import (
	"context"
	"fmt"
	"time"
)

// SessionPath is a changed path of a session without its content: what the
// explorer needs to know of every edit to tell files from folders.
type SessionPath struct {
	Path    string
	Deleted bool
}

// SessionPaths lists the session's changed paths, by path, without reading
// their contents (a session may hold up to its path limit of large files).
func (s *Store) SessionPaths(ctx context.Context, sessionID string) ([]SessionPath, error) {
	var ps []SessionPath
	err := s.db.WithContext(ctx).Model(&SessionFile{}).Select("path", "deleted").
		Where("session_id = ?", sessionID).Order("path").Scan(&ps).Error
	if err != nil {
		return nil, fmt.Errorf("models: paths of %s: %w", sessionID, err)
	}
	return ps, nil
}

// SessionFileVersion is a changed path of a session with its content's
// digest instead of its content.
type SessionFileVersion struct {
	Path    string
	Deleted bool
	SHA256  []byte `gorm:"column:content_sha256"` // nil for a deletion
}

// SessionFileVersions lists the session's changed paths with the digests
// PostgreSQL keeps of their contents (content_sha256), by path.
func (s *Store) SessionFileVersions(ctx context.Context, sessionID string) ([]SessionFileVersion, error) {
	var vs []SessionFileVersion
	err := s.db.WithContext(ctx).Model(&SessionFile{}).Select("path", "deleted", "content_sha256").
		Where("session_id = ?", sessionID).Order("path").Scan(&vs).Error
	if err != nil {
		return nil, fmt.Errorf("models: versions of %s: %w", sessionID, err)
	}
	return vs, nil
}

// CopySessionFiles copies the edits of session from into session to,
// written at, except those of the paths leave names, in one statement:
// the contents never leave the database.
func (s *Store) CopySessionFiles(ctx context.Context, from, to string, leave []string, at time.Time) error {
	err := s.db.WithContext(ctx).Exec(`INSERT INTO code_session_files (session_id, path, content, deleted, updated_at)
		SELECT ?, path, content, deleted, ? FROM code_session_files
		WHERE session_id = ? AND path <> ALL (?::text[])`, to, at, from, textArray(leave)).Error
	if err != nil {
		return fmt.Errorf("models: copy edits of %s into %s: %w", from, to, translate(err))
	}
	return nil
}
