package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// ErrLockHeld is work another connection holds the advisory lock of.
var ErrLockHeld = errors.New("models: the lock is held elsewhere")

// Exclusive runs fn while this process holds the session advisory lock key,
// on the one connection that holds it: every statement fn runs through tx
// runs on that connection. If the connection is lost the lock goes with
// it, and so does every later statement of fn, which fails instead of
// running beside whoever takes the lock next. It returns ErrLockHeld at
// once when another connection holds the lock.
func (s *Store) Exclusive(ctx context.Context, key int64, fn func(tx *Store) error) error {
	err := s.db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		// A new session per statement, all on the connection.
		db := conn.Session(&gorm.Session{NewDB: true, Context: ctx})
		var got bool
		if err := db.Raw(`SELECT pg_try_advisory_lock(?)`, key).Scan(&got).Error; err != nil {
			return fmt.Errorf("models: advisory lock %d: %w", key, translate(err))
		}
		if !got {
			return ErrLockHeld
		}
		// Given back with the connection if not here (a cancelled ctx).
		defer db.Session(&gorm.Session{Context: context.WithoutCancel(ctx)}).Exec(`SELECT pg_advisory_unlock(?)`, key)
		return fn(&Store{db: db, dsn: s.dsn, pinned: true})
	})
	if err != nil && unreachable(err) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Now is the database's clock, the one every used_at and published_at is
// written by.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.db.WithContext(ctx).Raw(`SELECT now()`).Scan(&now).Error; err != nil {
		return now, fmt.Errorf("models: now: %w", translate(err))
	}
	return now, nil
}

// Live commits, for the collector: the canonical commit of every project
// (archived ones too), the base of every session not yet closed, and the
// base and commit of every Change still on its way.
const liveCommits = `
	SELECT canonical_commit FROM projects WHERE canonical_commit IS NOT NULL
	UNION SELECT base_commit FROM code_sessions WHERE state <> 'closed'
	UNION SELECT base_commit FROM changes WHERE status IN ('composed', 'verifying', 'verified')
	UNION SELECT commit_sha FROM changes WHERE status IN ('composed', 'verifying', 'verified')`

// UnpublishDead deletes the published commits published before cutoff
// that no live commit names and returns them: their trees are garbage
// unless a live tree shares them, which the marks tell.
func (s *Store) UnpublishDead(ctx context.Context, cutoff time.Time) ([]string, error) {
	var gone []string
	err := s.db.WithContext(ctx).Raw(`DELETE FROM published_commits
		WHERE published_at < ? AND commit_sha NOT IN (`+liveCommits+`)
		RETURNING commit_sha`, cutoff).Scan(&gone).Error
	if err != nil {
		return nil, fmt.Errorf("models: unpublish dead commits: %w", translate(err))
	}
	return gone, nil
}

// PublishedRootsAfter returns up to limit published commits whose sha is
// after the given one, by sha, to walk them all in pages.
func (s *Store) PublishedRootsAfter(ctx context.Context, after string, limit int) ([]PublishedCommit, error) {
	var pcs []PublishedCommit
	err := s.db.WithContext(ctx).Where("commit_sha > ?", after).Order("commit_sha").Limit(limit).Find(&pcs).Error
	if err != nil {
		return nil, fmt.Errorf("models: published commits: %w", translate(err))
	}
	return pcs, nil
}

// ResetMarks forgets the marks of a previous collection.
func (s *Store) ResetMarks(ctx context.Context) error {
	if err := s.db.WithContext(ctx).Exec(`TRUNCATE gc_marks`).Error; err != nil {
		return fmt.Errorf("models: reset marks: %w", translate(err))
	}
	return nil
}

// Mark marks keys as needed by a live tree and returns those that were not
// marked yet, so a walk descends into each tree once.
func (s *Store) Mark(ctx context.Context, keys []string) ([]string, error) {
	var fresh []string
	for start := 0; start < len(keys); start += claimChunk {
		var part []string
		err := s.db.WithContext(ctx).Raw(`INSERT INTO gc_marks (key) SELECT unnest(?::text[])
			ON CONFLICT DO NOTHING RETURNING key`, textArray(keys[start:min(start+claimChunk, len(keys))])).Scan(&part).Error
		if err != nil {
			return nil, fmt.Errorf("models: mark: %w", translate(err))
		}
		fresh = append(fresh, part...)
	}
	return fresh, nil
}

// Unmarked returns up to limit stored objects after the given key whose key
// starts with prefix, that no mark names, and that were used before cutoff
// (young false) or since (young true), by key.
func (s *Store) Unmarked(ctx context.Context, prefix, after string, cutoff time.Time, young bool, limit int) ([]string, error) {
	age := "used_at < ?"
	if young {
		age = "used_at >= ?"
	}
	var keys []string
	err := s.db.WithContext(ctx).Raw(`SELECT key FROM stored_objects s
		WHERE starts_with(key, ?) AND key > ? AND `+age+`
		AND NOT EXISTS (SELECT 1 FROM gc_marks m WHERE m.key = s.key)
		ORDER BY key LIMIT ?`, prefix, after, cutoff, limit).Scan(&keys).Error
	if err != nil {
		return nil, fmt.Errorf("models: unmarked objects: %w", translate(err))
	}
	return keys, nil
}

// Doom deletes the rows of those keys that are still unmarked and unused
// since cutoff, and lists them as being deleted (gc_doomed), in one
// statement; it returns them. Each row's condition is checked again under
// its lock: a row a publish claimed meanwhile is kept.
func (s *Store) Doom(ctx context.Context, keys []string, cutoff time.Time) ([]StoredObject, error) {
	var doomed []StoredObject
	err := s.db.WithContext(ctx).Raw(`WITH gone AS (
			DELETE FROM stored_objects WHERE key IN (
				SELECT key FROM stored_objects s WHERE key IN ? AND used_at < ?
				AND NOT EXISTS (SELECT 1 FROM gc_marks m WHERE m.key = s.key)
				ORDER BY key FOR UPDATE)
			RETURNING key, size)
		INSERT INTO gc_doomed (key, size) SELECT key, size FROM gone
		ON CONFLICT (key) DO NOTHING
		RETURNING key, size`, keys, cutoff).Scan(&doomed).Error
	if err != nil {
		return nil, fmt.Errorf("models: doom objects: %w", translate(err))
	}
	return doomed, nil
}

// DoomedAfter returns up to limit objects being deleted after the given
// key: what an interrupted collection left.
func (s *Store) DoomedAfter(ctx context.Context, after string, limit int) ([]StoredObject, error) {
	var doomed []StoredObject
	err := s.db.WithContext(ctx).Raw(`SELECT key, size FROM gc_doomed WHERE key > ? ORDER BY key LIMIT ?`, after, limit).
		Scan(&doomed).Error
	if err != nil {
		return nil, fmt.Errorf("models: doomed objects: %w", translate(err))
	}
	return doomed, nil
}

// deletionLock is the advisory lock ("gcd") the collector holds while it
// deletes a batch of doomed objects from the object store, and that whoever
// takes a doomed key off the list waits for (ClearDoomed).
const deletionLock = 0x676364

// ErrNotPinned is a call that needs the one connection Exclusive holds,
// made through another Store.
var ErrNotPinned = errors.New("models: a session lock needs the connection Exclusive holds")

// DeleteDoomed deletes from the object store, through del, those of keys
// still listed as being deleted, and forgets the ones del reports deleted.
// It holds the deletion lock meanwhile, a session lock of the connection
// Exclusive holds, with no transaction open: the deletions take as long as
// the store does and hold no row and no other connection, and whoever
// wants to store one of these keys waits (ClearDoomed) until they are
// over. A lost connection gives the lock back and leaves the rows listed,
// for the next pass to finish.
func (s *Store) DeleteDoomed(ctx context.Context, keys []string, del func(listed []StoredObject) (deleted []string)) error {
	if !s.pinned {
		return ErrNotPinned
	}
	if err := s.db.WithContext(ctx).Exec(`SELECT pg_advisory_lock(?)`, deletionLock).Error; err != nil {
		return fmt.Errorf("models: deletion lock: %w", translate(err))
	}
	defer s.db.WithContext(context.WithoutCancel(ctx)).Exec(`SELECT pg_advisory_unlock(?)`, deletionLock)
	// Read under the lock: a key taken off the list before it keeps its
	// object.
	var listed []StoredObject
	err := s.db.WithContext(ctx).Raw(`SELECT key, size FROM gc_doomed WHERE key IN ? ORDER BY key`, keys).Scan(&listed).Error
	if err != nil {
		return fmt.Errorf("models: doomed objects: %w", translate(err))
	}
	deleted := del(listed)
	if len(deleted) == 0 {
		return nil
	}
	if err := s.db.WithContext(ctx).Exec(`DELETE FROM gc_doomed WHERE key IN ?`, deleted).Error; err != nil {
		return fmt.Errorf("models: drop doomed objects: %w", translate(err))
	}
	return nil
}

// OldestSpared returns when the oldest thing used or published since
// cutoff that a collection spared only for its age was used or published:
// an object no mark names, or a published commit no live commit names.
// The next collection that can free something is due once it is older
// than the grace; nil when there is none.
func (s *Store) OldestSpared(ctx context.Context, cutoff time.Time) (*time.Time, error) {
	var oldest sql.NullTime
	err := s.db.WithContext(ctx).Raw(`SELECT least(
			(SELECT min(used_at) FROM stored_objects s WHERE used_at >= ?
				AND NOT EXISTS (SELECT 1 FROM gc_marks m WHERE m.key = s.key)),
			(SELECT min(published_at) FROM published_commits WHERE published_at >= ?
				AND commit_sha NOT IN (`+liveCommits+`)))`, cutoff, cutoff).Scan(&oldest).Error
	if err != nil {
		return nil, fmt.Errorf("models: oldest spared: %w", translate(err))
	}
	if !oldest.Valid {
		return nil, nil
	}
	return &oldest.Time, nil
}

// StoreTotals is what the object store holds by its index.
type StoreTotals struct {
	Objects int64
	Bytes   int64
}

// StoredTotals sums the index of the object store.
func (s *Store) StoredTotals(ctx context.Context) (StoreTotals, error) {
	var t StoreTotals
	err := s.db.WithContext(ctx).Raw(`SELECT count(*) AS objects, coalesce(sum(size), 0) AS bytes FROM stored_objects`).
		Scan(&t).Error
	if err != nil {
		return t, fmt.Errorf("models: stored totals: %w", translate(err))
	}
	return t, nil
}

// ProjectBytes is the size of one project's code.
type ProjectBytes struct {
	ProjectID int64
	Project   string
	Archived  bool
	// Bytes is the size of the canonical tree's files; nil while it is not
	// published (or not measured) yet.
	Bytes *int64
}

// CodeBytes returns the size of every Container project's canonical
// tree, largest first, then by name.
func (s *Store) CodeBytes(ctx context.Context) ([]ProjectBytes, error) {
	var rows []ProjectBytes
	err := s.db.WithContext(ctx).Raw(`SELECT p.id AS project_id, p.name AS project, p.status = ? AS archived, pc.tree_bytes AS bytes
		FROM projects p LEFT JOIN published_commits pc ON pc.commit_sha = p.canonical_commit
		WHERE p.workspace_mode = ?
		ORDER BY pc.tree_bytes DESC NULLS LAST, p.name, p.id`, StatusArchived, ModeContainer).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("models: code bytes: %w", translate(err))
	}
	return rows, nil
}

// textArray is a text[] parameter: gorm would spread a plain slice into a
// list of parameters, which unnest cannot take.
type textArray []string

// Value writes the array as PostgreSQL's text form, every element quoted.
func (a textArray) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range v {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}

// int8Array is a bigint[] parameter, as textArray.
type int8Array []int64

// Value writes the array as PostgreSQL's text form.
func (a int8Array) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	b.WriteByte('}')
	return b.String(), nil
}
