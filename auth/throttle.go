package auth

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"atelier/fault"
)

// ErrTooManyAttempts is a sign-in refused, without checking the password,
// because the account or the client's address failed too often lately. The
// error a person gets is a *TooManyAttemptsError, which says how long to wait.
var ErrTooManyAttempts = fault.New(fault.Limit, "too_many_attempts",
	"auth: too many failed sign-ins", "Too many failed sign-ins; wait and try again.")

// TooManyAttemptsError is ErrTooManyAttempts with the wait of one case.
type TooManyAttemptsError struct{ Wait time.Duration }

func (e *TooManyAttemptsError) Error() string { return ErrTooManyAttempts.Error() }
func (e *TooManyAttemptsError) Unwrap() error { return ErrTooManyAttempts }

func (e *TooManyAttemptsError) Fault() fault.Fault {
	f := ErrTooManyAttempts.(fault.Error).Fault()
	secs := int64(math.Ceil(e.Wait.Seconds()))
	f.Message = fmt.Sprintf("Too many failed sign-ins; try again in %d seconds.", secs)
	f.RetryAfter = e.Wait
	return f
}

// Sign-in throttling. The first failures are free (people mistype); after
// them each further failure doubles the wait before the next try, up to a
// ceiling, so a guesser gets a few tries an hour while the owner who knows
// the password is never locked out for longer than the ceiling. A success
// clears the account's record; an address's record is only forgotten with
// time, or an attacker could clear it by signing in to an account of their own.
const (
	freeAccountFailures = 5  // per username, before delays start
	freeAddressFailures = 20 // per client address; a NAT hides an office behind one
	firstDelay          = time.Second
	maxDelay            = 15 * time.Minute
	// forgetAfter drops a record whose last failure is this old.
	forgetAfter = time.Hour
	// maxTracked bounds each table (about 100 bytes a record). When it is
	// full of live records, new keys go unrecorded: an attacker with that
	// many addresses is already past a per-address bound, and the
	// per-account table still holds the accounts being guessed.
	maxTracked = 100_000
)

// throttle remembers recent sign-in failures per key, in memory.
//
// Why not golang.org/x/time/rate: a token bucket refills at a fixed rate, so
// it cannot make each further failure cost more than the last, and it has no
// idea of "a success clears the record". Why not PostgreSQL: a failure would
// then cost a write, the very load a flood brings. The price of memory: each
// instance keeps its own records, so behind a balancer spreading sign-ins
// over n instances a guesser gets up to n times the tries, and a restart
// forgets. The delays still grow exponentially, so n instances buy only
// log2(n) fewer steps of doubling.
type throttle struct {
	free      int
	mu        sync.Mutex
	records   map[string]*strikes
	lastSweep time.Time
}

type strikes struct {
	failures int       // since the record began
	last     time.Time // of the last failure
	next     time.Time // no attempt before this
	pending  int       // attempts being checked now
}

func newThrottle(free int) *throttle {
	return &throttle{free: free, records: map[string]*strikes{}}
}

// begin admits an attempt for key or says how long to wait. Past the free
// failures only one attempt at a time is checked, so a burst of concurrent
// guesses cannot all slip in before the first of them fails.
func (t *throttle) begin(key string, now time.Time) (time.Duration, bool) {
	if key == "" {
		return 0, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[key]
	if r != nil && r.pending == 0 && now.Sub(r.last) > forgetAfter && !now.Before(r.next) {
		delete(t.records, key)
		r = nil
	}
	if r == nil {
		if len(t.records) >= maxTracked {
			t.sweep(now)
			if len(t.records) >= maxTracked {
				return 0, true
			}
		}
		r = &strikes{}
		t.records[key] = r
	}
	if now.Before(r.next) {
		return r.next.Sub(now), false
	}
	if r.failures+r.pending >= t.free && r.pending > 0 {
		return firstDelay, false
	}
	r.pending++
	return 0, true
}

// end records how an attempt admitted by begin went.
func (t *throttle) end(key string, now time.Time, failed, clear bool) {
	if key == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[key]
	if r == nil {
		return
	}
	r.pending--
	switch {
	case failed:
		r.failures++
		r.last = now
		if over := r.failures - t.free; over >= 0 {
			r.next = now.Add(delayAfter(over))
		}
	case clear && r.pending == 0:
		delete(t.records, key)
	}
}

// delayAfter is the wait after the n-th failure past the free ones (n from 0).
func delayAfter(n int) time.Duration {
	if n >= 30 {
		return maxDelay
	}
	return min(firstDelay<<n, maxDelay)
}

// sweep drops forgotten records; it runs at most once a minute, since it
// reads the whole table.
func (t *throttle) sweep(now time.Time) {
	if now.Sub(t.lastSweep) < time.Minute {
		return
	}
	t.lastSweep = now
	for k, r := range t.records {
		if r.pending == 0 && now.Sub(r.last) > forgetAfter && !now.Before(r.next) {
			delete(t.records, k)
		}
	}
}

// hashGate lets at most cap(slots) argon2 computations run at once: each
// takes 19 MiB and a core, so an unbounded burst of sign-ins would take the
// server's memory and every core from everyone else.
type hashGate struct {
	slots   chan struct{}
	running atomic.Int64
	peak    atomic.Int64 // the most ever running at once, for tests
}

func newHashGate(n int) *hashGate { return &hashGate{slots: make(chan struct{}, max(n, 1))} }

// run computes fn in a free slot, waiting for one as long as ctx lasts.
func (g *hashGate) run(ctx context.Context, fn func()) error {
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("auth: waiting to check a password: %w", ctx.Err())
	}
	defer func() { <-g.slots }()
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	fn()
	return nil
}
