package workbench

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A key's work under way after its commands' answers holds up its waiters
// until the last of it ends, and nobody else's; a waiter whose context
// ends goes.
func TestAfterAnswerWaitsForItsKey(t *testing.T) {
	var s afterAnswer[int64]
	if err := s.wait(t.Context(), 1); err != nil {
		t.Fatalf("nothing under way: %v", err)
	}
	first, second := s.begin(1), s.begin(1)
	end := s.begin(2)
	if err := s.wait(t.Context(), 3); err != nil {
		t.Fatalf("another project waited: %v", err)
	}

	waited := make(chan error, 1)
	go func() { waited <- s.wait(context.Background(), 1) }()
	first()
	select {
	case err := <-waited:
		t.Fatalf("the wait ended with work still under way: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	second()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.wait(ctx, 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	all := make(chan error, 1)
	go func() { all <- s.waitAll(context.Background()) }()
	select {
	case err := <-all:
		t.Fatalf("Close's wait ended with work under way: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	end()
	if err := <-all; err != nil {
		t.Fatal(err)
	}
	if len(s.pending) != 0 {
		t.Fatalf("work left: %v", s.pending)
	}
	// Work may begin again after Close's wait, which then waits anew.
	again := s.begin(1)
	if err := s.waitAll(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait for all: %v", err)
	}
	again()
	if err := s.waitAll(t.Context()); err != nil {
		t.Fatal(err)
	}
}
