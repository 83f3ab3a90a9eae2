package server

import (
	"context"
	"slices"
	"sync"
	"time"
)

// loops are the background loops a server runs beside its requests (the
// sweeps, the publisher, the collector, the Changes' verifier), owned by
// one group: shutdown ends them together and waits for each, so none of
// them still works on the pool, the object store or a session's checkout
// once those close.
type loops struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]int // by name, for the log of those that overstay
}

// newLoops makes a group whose loops run until ctx ends or Stop.
func newLoops(ctx context.Context) *loops {
	ctx, cancel := context.WithCancel(ctx)
	return &loops{ctx: ctx, cancel: cancel, running: map[string]int{}}
}

// Go runs loop in a goroutine of the group's; loop must return once its
// context ends. name says which loop it is in the log.
func (l *loops) Go(name string, loop func(context.Context)) {
	l.mu.Lock()
	l.running[name]++
	l.mu.Unlock()
	l.wg.Go(func() {
		defer func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.running[name]--; l.running[name] == 0 {
				delete(l.running, name)
			}
		}()
		loop(l.ctx)
	})
}

// Stop ends the loops' context and waits for them, at most grace. It
// answers the names of the loops still running then, sorted, which it
// leaves behind: a shutdown is bounded even when a loop is stuck.
func (l *loops) Stop(grace time.Duration) []string {
	l.cancel()
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for name := range l.running {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
