package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm/clause"
)

// StoredObject is one object known to be in the object store.
type StoredObject struct {
	Key      string `gorm:"primaryKey"`
	Size     int64
	StoredAt time.Time `gorm:"default:now()"`
}

// PublishedCommit is a commit whose whole tree is in the object store.
type PublishedCommit struct {
	CommitSHA   string `gorm:"column:commit_sha;primaryKey"`
	RootTree    string
	PublishedAt time.Time `gorm:"default:now()"`
}

// StoredKeys returns which of keys the object store already holds.
func (s *Store) StoredKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	have := make(map[string]bool, len(keys))
	const chunk = 5000
	for start := 0; start < len(keys); start += chunk {
		var found []string
		part := keys[start:min(start+chunk, len(keys))]
		if err := s.db.WithContext(ctx).Model(&StoredObject{}).Where("key IN ?", part).Pluck("key", &found).Error; err != nil {
			return nil, fmt.Errorf("models: stored objects: %w", err)
		}
		for _, k := range found {
			have[k] = true
		}
	}
	return have, nil
}

// AddStoredObjects records objects that were just stored.
func (s *Store) AddStoredObjects(ctx context.Context, objs []StoredObject) error {
	if len(objs) == 0 {
		return nil
	}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(objs, 1000).Error
	if err != nil {
		return fmt.Errorf("models: add stored objects: %w", translate(err))
	}
	return nil
}

// AddPublishedCommit records that commit's tree is fully stored.
func (s *Store) AddPublishedCommit(ctx context.Context, commit, rootTree string) error {
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).
		Create(&PublishedCommit{CommitSHA: commit, RootTree: rootTree}).Error
	if err != nil {
		return fmt.Errorf("models: publish %s: %w", commit, translate(err))
	}
	return nil
}

// PublishedRoot returns the root tree of a published commit, or ErrNotFound.
func (s *Store) PublishedRoot(ctx context.Context, commit string) (string, error) {
	var pc PublishedCommit
	if err := s.db.WithContext(ctx).Where("commit_sha = ?", commit).Take(&pc).Error; err != nil {
		return "", fmt.Errorf("models: published commit %s: %w", commit, translate(err))
	}
	return pc.RootTree, nil
}

// LockProject takes the project's row lock for the rest of the transaction.
// Everything that advances a project's canonical commit holds it, so the
// row and the repository move together and in one order.
func (s *Store) LockProject(ctx context.Context, projectID int64) (*Project, error) {
	var p Project
	err := s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).First(&p, projectID).Error
	if err != nil {
		return nil, fmt.Errorf("models: lock project %d: %w", projectID, translate(err))
	}
	return &p, nil
}

// SetCanonicalCommit records the project's canonical commit.
func (s *Store) SetCanonicalCommit(ctx context.Context, projectID int64, commit string) error {
	res := s.db.WithContext(ctx).Model(&Project{}).Where("id = ?", projectID).UpdateColumn("canonical_commit", commit)
	if res.Error != nil {
		return fmt.Errorf("models: canonical commit of project %d: %w", projectID, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: canonical commit of project %d: %w", projectID, ErrNotFound)
	}
	return nil
}

// UnpublishedProjects lists Container projects whose canonical commit is not
// in the object store yet, such as after the store was down during an
// import.
func (s *Store) UnpublishedProjects(ctx context.Context) ([]Project, error) {
	var ps []Project
	err := s.db.WithContext(ctx).
		Where("workspace_mode = ? AND canonical_commit IS NOT NULL", ModeContainer).
		Where("NOT EXISTS (SELECT 1 FROM published_commits pc WHERE pc.commit_sha = projects.canonical_commit)").
		Order("id").Find(&ps).Error
	if err != nil {
		return nil, fmt.Errorf("models: unpublished projects: %w", err)
	}
	return ps, nil
}
