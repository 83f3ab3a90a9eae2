package models_test

import (
	"context"
	"errors"
	"testing"

	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/wait"
)

// Exclusive work runs in one place at a time, and a holder whose
// connection is lost loses the work with it: its next statement fails
// instead of running beside whoever takes the lock next.
func TestExclusiveHoldsOnItsConnection(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	const key = 0x7465737431
	held, lost := make(chan struct{}), make(chan struct{})
	var afterLoss error
	done := make(chan error, 1)
	go func() {
		done <- s.Exclusive(ctx, key, func(tx *models.Store) error {
			close(held)
			<-lost
			_, afterLoss = tx.Now(ctx)
			return nil
		})
	}()
	<-held
	if err := s.Exclusive(ctx, key, func(*models.Store) error { return nil }); !errors.Is(err, models.ErrLockHeld) {
		t.Fatalf("a second holder at once: %v, want ErrLockHeld", err)
	}
	// The holder's connection goes, as in a network cut or a restart.
	if err := s.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = ?`, key); err != nil {
		t.Fatal(err)
	}
	// The backend ends a moment after it is told to.
	wait.For(t, wait.Long, "the lock to come free once its holder's connection went", func() bool {
		err := s.Exclusive(ctx, key, func(*models.Store) error { return nil })
		if err != nil && !errors.Is(err, models.ErrLockHeld) {
			t.Fatalf("after the holder's connection went: %v", err)
		}
		return err == nil
	})
	close(lost)
	<-done
	if afterLoss == nil {
		t.Fatal("the holder that lost its connection still ran a statement")
	}
	// Given back at the end, the lock is free again.
	if err := s.Exclusive(ctx, key, func(*models.Store) error { return nil }); err != nil {
		t.Fatalf("after both: %v", err)
	}
}

// The deletion lock is a session lock, so it is taken only through the
// Store Exclusive passes: through the pool, the lock and its release could
// land on two connections and the lock stay held for good.
func TestDeleteDoomedNeedsExclusivesConnection(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	called := false
	del := func([]models.StoredObject) []string { called = true; return nil }
	if err := s.DeleteDoomed(ctx, []string{"blobs/x"}, del); !errors.Is(err, models.ErrNotPinned) || called {
		t.Fatalf("through the pool: %v, deleted %v; want ErrNotPinned and nothing deleted", err, called)
	}
	err := s.Exclusive(ctx, 0x7465737432, func(tx *models.Store) error { return tx.DeleteDoomed(ctx, []string{"blobs/x"}, del) })
	if err != nil || !called {
		t.Fatalf("through Exclusive: %v, deleted %v", err, called)
	}
}
