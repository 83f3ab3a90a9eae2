package workbench

import (
	"context"
	"sync"
)

// afterAnswer counts, by key, the work commands do once they have been
// answered, so that whoever must see that work done waits for it and
// nobody else does. A command's answer waits neither for the meter's
// settling of its sandbox time (a transaction of several statements;
// keyed by project: the project's history on this instance waits, and
// its next reservation when the month refuses it, so nobody here reads
// or is refused against a reservation its command no longer needs) nor
// for its audit row (keyed by session: the session's history waits, and
// its next audit row, so rows keep the commands' order). Close waits for
// every one. Each ends within its statements' own timeout; a session has
// at most one row under way, and a project at most settlingsUnderWay
// settlings (its next reservation waits past that).
type afterAnswer[K comparable] struct {
	mu      sync.Mutex
	pending map[K]*underWay
	all     underWay
}

// underWay counts the work under way for a key; done closes when the
// last of it ends.
type underWay struct {
	n    int
	done chan struct{}
}

func (u *underWay) add() {
	if u.n == 0 {
		u.done = make(chan struct{})
	}
	u.n++
}

// end reports whether it ended the last one.
func (u *underWay) end() bool {
	if u.n--; u.n == 0 {
		close(u.done)
		return true
	}
	return false
}

// begin counts work of key's under way until end is called.
func (s *afterAnswer[K]) begin(key K) (end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = make(map[K]*underWay)
	}
	p := s.pending[key]
	if p == nil {
		p = &underWay{}
		s.pending[key] = p
	}
	p.add()
	s.all.add()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.end() {
			delete(s.pending, key)
		}
		s.all.end()
	}
}

// wait returns once key has no work under way, or ctx ends.
func (s *afterAnswer[K]) wait(ctx context.Context, key K) error {
	s.mu.Lock()
	var done chan struct{}
	if p := s.pending[key]; p != nil {
		done = p.done
	}
	s.mu.Unlock()
	return waitFor(ctx, done)
}

// underWay is how much work of key's is under way.
func (s *afterAnswer[K]) underWay(key K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[key]; p != nil {
		return p.n
	}
	return 0
}

// waitAll returns once no work is under way, or ctx ends. Work may begin
// again after.
func (s *afterAnswer[K]) waitAll(ctx context.Context) error {
	s.mu.Lock()
	var done chan struct{}
	if s.all.n > 0 {
		done = s.all.done
	}
	s.mu.Unlock()
	return waitFor(ctx, done)
}

func waitFor(ctx context.Context, done <-chan struct{}) error {
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
