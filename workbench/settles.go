package workbench

import (
	"context"
	"sync"
)

// settles are the meter's settlings of commands that were answered
// already: a command's answer does not wait for its sandbox time to be
// settled (a transaction of several statements), but the project's next
// reservation on this instance and its history do, so nobody here reads
// or reserves against a reservation its command no longer needs, and
// Close waits for every one. Each settling ends within the meter's own
// timeout, and a project has at most those of the commands that ended
// before its next one reserved.
type settles struct {
	mu      sync.Mutex
	pending map[int64]*underWay // by project
	all     underWay
}

// underWay counts settlings; done closes when the last of them ends.
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

// begin counts a settling of project's under way until end is called.
func (s *settles) begin(project int64) (end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = make(map[int64]*underWay)
	}
	p := s.pending[project]
	if p == nil {
		p = &underWay{}
		s.pending[project] = p
	}
	p.add()
	s.all.add()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.end() {
			delete(s.pending, project)
		}
		s.all.end()
	}
}

// wait returns once project has no settling under way, or ctx ends.
func (s *settles) wait(ctx context.Context, project int64) error {
	s.mu.Lock()
	var done chan struct{}
	if p := s.pending[project]; p != nil {
		done = p.done
	}
	s.mu.Unlock()
	return waitFor(ctx, done)
}

// waitAll returns once no settling is under way, or ctx ends. Settlings
// may begin again after.
func (s *settles) waitAll(ctx context.Context) error {
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
