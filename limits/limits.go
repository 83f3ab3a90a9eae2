// Package limits bounds how many of something run at once: streams per
// account, imports and searches per instance. A bound lives in the
// memory of one instance, because what it counts (an open connection, a
// running import) lives and dies with that process; bounds over all
// instances are counted in the database by the packages that own them.
package limits

import (
	"context"
	"sync"

	"atelier/fault"
)

// Gate admits at most PerKey holders per key and Total in all; zero means
// no bound. The error given to NewGate is returned when either is reached.
type Gate[K comparable] struct {
	perKey, total int
	refused       error

	mu   sync.Mutex
	held map[K]int
	all  int
}

// NewGate returns a Gate that refuses with refused.
func NewGate[K comparable](perKey, total int, refused error) *Gate[K] {
	return &Gate[K]{perKey: perKey, total: total, refused: refused, held: map[K]int{}}
}

// Enter takes a place for key, or returns the Gate's error when none is
// free. release gives the place back; calling it more than once is safe,
// so it may be deferred and also called early.
func (g *Gate[K]) Enter(key K) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.perKey > 0 && g.held[key] >= g.perKey || g.total > 0 && g.all >= g.total {
		return nil, g.refused
	}
	g.held[key]++
	g.all++
	var once sync.Once
	return func() { once.Do(func() { g.leave(key) }) }, nil
}

// Hold is Enter for callers that hold things through a context.
func (g *Gate[K]) Hold(_ context.Context, key K) (release func(), err error) { return g.Enter(key) }

// Total is how many places are held, for every key together.
func (g *Gate[K]) Total() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.all
}

func (g *Gate[K]) leave(key K) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all--
	if g.held[key]--; g.held[key] == 0 {
		delete(g.held, key) // a map of every account ever seen would only grow
	}
}

// ErrStreams refuses an event stream past an account's bound.
var ErrStreams = fault.New(fault.Limit, "too_many_streams", "limits: this account has as many event streams open as it may; close a tab first", "You have as many live views open as an account may; close a tab first.")

// StreamsPerAccount is how many event streams (terminals, the admin event
// stream) one account may hold open at once on an instance.
const StreamsPerAccount = 64

// NewStreams returns the Gate of open event streams per account.
func NewStreams() *Gate[int64] { return NewGate[int64](StreamsPerAccount, 0, ErrStreams) }

// ErrSearches refuses a content search past its account's or the
// instance's bound.
var ErrSearches = fault.New(fault.Limit, "too_many_searches", "limits: as many searches run as may; wait for one to end", "Too many searches are running; try again when one has ended.")

// Content searches one account may run at once, and all accounts together
// on an instance: each holds a git process of four threads (or four
// readers of a Local folder) for up to its timeout.
const (
	SearchesPerAccount = 2
	SearchesRunning    = 8
)

// NewSearches returns the Gate of running content searches.
func NewSearches() *Gate[int64] {
	return NewGate[int64](SearchesPerAccount, SearchesRunning, ErrSearches)
}
