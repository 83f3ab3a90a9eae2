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
	pending map[int64]*projectSettles
	all     sync.WaitGroup
}

// projectSettles are one project's settlings under way; done closes when
// the last of them ends.
type projectSettles struct {
	n    int
	done chan struct{}
}

// begin counts a settling of project's under way until end is called.
func (s *settles) begin(project int64) (end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = make(map[int64]*projectSettles)
	}
	p := s.pending[project]
	if p == nil {
		p = &projectSettles{done: make(chan struct{})}
		s.pending[project] = p
	}
	p.n++
	s.all.Add(1)
	return func() {
		s.mu.Lock()
		if p.n--; p.n == 0 {
			close(p.done)
			delete(s.pending, project)
		}
		s.mu.Unlock()
		s.all.Done()
	}
}

// wait returns once project has no settling under way, or ctx ends.
func (s *settles) wait(ctx context.Context, project int64) error {
	s.mu.Lock()
	p := s.pending[project]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
