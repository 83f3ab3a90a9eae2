package models

import (
	"context"
	"fmt"
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
