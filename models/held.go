package models

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"
)

// importLockSpace is the first key of the advisory lock an import of a
// project holds while it runs; the second is the project's id.
const importLockSpace = 0x696d7074 // "impt"

// HoldImportLock takes the lock of an import of the project, for as long
// as the import runs, whichever instance runs it; it returns ErrLockHeld at
// once when another import holds it. The lock lives on a connection set
// aside for it, so it goes with the connection: an instance that dies
// frees its imports' places. Ids past 2^31 share a lock with an id 2^32
// apart, which can only make an import wait, never run two at once.
func (s *Store) HoldImportLock(ctx context.Context, projectID int64) (release func(), err error) {
	return s.hold(ctx, importLockSpace, int32(projectID))
}

// hold takes the session advisory lock (space, key) on a connection of the
// pool kept out of it until release. release gives the lock and the
// connection back; calling it again does nothing.
func (s *Store) hold(ctx context.Context, space, key int32) (func(), error) {
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, fmt.Errorf("models: advisory lock (%d, %d): %w", space, key, err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("models: advisory lock (%d, %d): %w", space, key, markedUnavailable(err))
	}
	var got bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, $2)`, space, key).Scan(&got); err != nil {
		conn.Close()
		return nil, fmt.Errorf("models: advisory lock (%d, %d): %w", space, key, markedUnavailable(err))
	}
	if !got {
		conn.Close()
		return nil, ErrLockHeld
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var unlocked bool
			err := conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1, $2)`, space, key).Scan(&unlocked)
			if err != nil || !unlocked {
				// A connection that may still hold the lock never goes
				// back to the pool, where the next caller would hold it
				// unknowingly: closed, it frees the lock.
				conn.Raw(func(any) error { return driver.ErrBadConn })
			}
			conn.Close()
		})
	}, nil
}

// markedUnavailable is err as ErrUnavailable when PostgreSQL could not be
// reached, for statements that run past gorm's callbacks.
func markedUnavailable(err error) error {
	if unreachable(err) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
