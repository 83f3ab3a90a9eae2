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
	// UsedAt is when a publish last stored the object or claimed it
	// (ClaimStoredObjects); the collector sweeps only what is older than
	// its grace.
	UsedAt time.Time `gorm:"default:now()"`
}

// PublishedCommit is a commit whose whole tree is in the object store.
type PublishedCommit struct {
	CommitSHA   string `gorm:"column:commit_sha;primaryKey"`
	RootTree    string
	PublishedAt time.Time `gorm:"default:now()"`
	// TreeBytes is the size of the commit's files, each path counted; nil
	// for a commit published before it was recorded.
	TreeBytes *int64
}

// claimChunk is how many keys one claim or tombstone statement names.
const claimChunk = 5000

// ClaimStoredObjects returns which of keys the object store holds and
// marks each of them used now, so that no collection sweeps it for a
// grace period: a publish claims what it finds stored before it counts on
// it. The rows are locked in key order, the order the collector locks them
// in too, so a claim and a sweep never wait for each other in a circle; a
// claim that meets a row the collector is deleting waits for it and then
// finds the object gone.
func (s *Store) ClaimStoredObjects(ctx context.Context, keys []string) (map[string]bool, error) {
	have := make(map[string]bool, len(keys))
	for start := 0; start < len(keys); start += claimChunk {
		var found []string
		part := keys[start:min(start+claimChunk, len(keys))]
		err := s.db.WithContext(ctx).Raw(`UPDATE stored_objects s SET used_at = now()
			FROM (SELECT key FROM stored_objects WHERE key IN ? ORDER BY key FOR UPDATE) l
			WHERE s.key = l.key RETURNING s.key`, part).Scan(&found).Error
		if err != nil {
			return nil, fmt.Errorf("models: claim stored objects: %w", translate(err))
		}
		for _, k := range found {
			have[k] = true
		}
	}
	return have, nil
}

// ClearDoomed takes keys off the collector's list of objects being
// deleted, waiting for a collector that is deleting some right now
// (DeleteDoomed). Whoever stores an object the index lacks calls it first,
// so the upload always comes after any deletion of the same key.
//
// Only a call that finds one of its keys listed waits. A key listed after
// that look is not one of an upload's: it was missing from the index when
// the publish looked, and an object recorded since is younger than the
// grace, which no sweep takes (storage/codestore/collect.go).
func (s *Store) ClearDoomed(ctx context.Context, keys []string) error {
	for start := 0; start < len(keys); start += claimChunk {
		part := keys[start:min(start+claimChunk, len(keys))]
		var listed bool
		err := s.db.WithContext(ctx).Raw(`SELECT EXISTS (SELECT 1 FROM gc_doomed WHERE key IN ?)`, part).Scan(&listed).Error
		if err == nil && listed {
			err = s.Tx(ctx, func(tx *Store) error {
				if err := tx.db.WithContext(ctx).Exec(`SELECT pg_advisory_xact_lock_shared(?)`, deletionLock).Error; err != nil {
					return err
				}
				return tx.db.WithContext(ctx).Exec(`DELETE FROM gc_doomed WHERE key IN ?`, part).Error
			})
		}
		if err != nil {
			return fmt.Errorf("models: clear doomed objects: %w", translate(err))
		}
	}
	return nil
}

// AddStoredObjects records objects that were just stored, used now,
// provided the database's clock is still before deadline; it reports false,
// recording nothing, when it is not. A publish records nothing past the
// grace of its claims: a tree recorded later could name a blob the
// collector has meanwhile taken for garbage (storage/codestore/collect.go).
func (s *Store) AddStoredObjects(ctx context.Context, objs []StoredObject, deadline time.Time) (bool, error) {
	for start := 0; start < len(objs); start += claimChunk {
		part := objs[start:min(start+claimChunk, len(objs))]
		keys, sizes := make(textArray, len(part)), make(int8Array, len(part))
		for i, o := range part {
			keys[i], sizes[i] = o.Key, o.Size
		}
		res := s.db.WithContext(ctx).Exec(`INSERT INTO stored_objects (key, size)
			SELECT k, z FROM unnest(?::text[], ?::bigint[]) AS t(k, z) WHERE now() < ?
			ON CONFLICT (key) DO UPDATE SET used_at = now()`, keys, sizes, deadline)
		if res.Error != nil {
			return false, fmt.Errorf("models: add stored objects: %w", translate(res.Error))
		}
		if res.RowsAffected == 0 {
			return false, nil
		}
	}
	return true, nil
}

// AddPublishedCommit records that commit's tree, of treeBytes, is fully
// stored, provided the database's clock is still before deadline. It
// reports false when it is not: the publish took longer than the grace
// that protected what it claimed, so it must claim again. A commit another
// publish recorded meanwhile counts as recorded.
func (s *Store) AddPublishedCommit(ctx context.Context, commit, rootTree string, treeBytes int64, deadline time.Time) (bool, error) {
	var added []string
	err := s.db.WithContext(ctx).Raw(`INSERT INTO published_commits (commit_sha, root_tree, tree_bytes)
		SELECT ?, ?, ? WHERE now() < ?
		ON CONFLICT (commit_sha) DO UPDATE SET tree_bytes = coalesce(published_commits.tree_bytes, EXCLUDED.tree_bytes)
		RETURNING commit_sha`, commit, rootTree, treeBytes, deadline).Scan(&added).Error
	if err != nil {
		return false, fmt.Errorf("models: publish %s: %w", commit, translate(err))
	}
	return len(added) == 1, nil
}

// SetTreeBytes records the size of a commit published before sizes were.
func (s *Store) SetTreeBytes(ctx context.Context, commit string, treeBytes int64) error {
	err := s.db.WithContext(ctx).Model(&PublishedCommit{}).Where("commit_sha = ? AND tree_bytes IS NULL", commit).
		UpdateColumn("tree_bytes", treeBytes).Error
	if err != nil {
		return fmt.Errorf("models: size of %s: %w", commit, translate(err))
	}
	return nil
}

// PublishedRoot returns the root tree of a published commit, or ErrNotFound.
func (s *Store) PublishedRoot(ctx context.Context, commit string) (string, error) {
	pc, err := s.PublishedCommitOf(ctx, commit)
	if err != nil {
		return "", err
	}
	return pc.RootTree, nil
}

// PublishedCommitOf returns the published commit's row, or ErrNotFound.
func (s *Store) PublishedCommitOf(ctx context.Context, commit string) (*PublishedCommit, error) {
	var pc PublishedCommit
	if err := s.db.WithContext(ctx).Where("commit_sha = ?", commit).Take(&pc).Error; err != nil {
		return nil, fmt.Errorf("models: published commit %s: %w", commit, translate(err))
	}
	return &pc, nil
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
// import, or was published before its size was recorded.
func (s *Store) UnpublishedProjects(ctx context.Context) ([]Project, error) {
	var ps []Project
	err := s.db.WithContext(ctx).
		Where("workspace_mode = ? AND canonical_commit IS NOT NULL", ModeContainer).
		Where("NOT EXISTS (SELECT 1 FROM published_commits pc WHERE pc.commit_sha = projects.canonical_commit AND pc.tree_bytes IS NOT NULL)").
		Order("id").Find(&ps).Error
	if err != nil {
		return nil, fmt.Errorf("models: unpublished projects: %w", err)
	}
	return ps, nil
}
