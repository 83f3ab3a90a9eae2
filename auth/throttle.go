package auth

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"atelier/fault"
	"atelier/models"
)

// ErrTooManyAttempts is a sign-in refused, without checking the password,
// because the client's address failed too often lately, on this account or
// on any. The error a person gets is a *TooManyAttemptsError, which says
// how long to wait.
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

// Sign-in throttling. A wrong password slows the address it came from, never
// the account for everyone: if it did, anyone could keep any account locked
// by sending one wrong password each time the wait ends. Failures are
// counted three ways, each with its own record:
//
//   - per account and address: the first failures are free (people mistype),
//     then each further one doubles the wait before that address's next try
//     on that account, up to a ceiling; a success clears the record;
//   - per address, over all accounts, the same with more free failures (a
//     NAT hides an office behind one address); only time forgets it, or an
//     attacker could clear it by signing in to an account of their own;
//   - per account, over all addresses, the same as the first; this record
//     holds back only addresses that failed lately (on any account) or have
//     a sign-in being checked. It bounds a guesser with many addresses: each
//     address gets its first try, and from then on shares the account's
//     wait for an hour. An address with a clean record is never held by it,
//     so the rightful person, from anywhere they have not mistyped lately,
//     signs in whatever others send.
//
// The records live in PostgreSQL (sign_in_records), so every instance of
// one database holds a client to the same bound, whichever instance its
// attempts reach, and a restart forgets nothing. An attempt reads and
// writes them in one short transaction before its password is checked and
// one after: little beside the hash it waits for. A refusal costs less:
// each instance remembers the waits it has seen, and a client still
// within one is refused from memory, so a flood of refused attempts does
// not become a flood of writes.
const (
	freeAccountFailures = 5  // per account and address, and per account over all addresses
	freeAddressFailures = 20 // per client address
	firstDelay          = time.Second
	maxDelay            = 15 * time.Minute
	// forgetAfter drops a record whose last failure is this old; an address
	// counts as having failed lately while its record lives.
	forgetAfter = time.Hour
	// checkLease is how long an attempt being checked counts as one: an
	// instance that died while checking holds nothing back for longer.
	checkLease = time.Minute
	// pruneEvery is how often an instance deletes the forgotten records.
	pruneEvery = time.Minute
	// maxTracked bounds the records of all three kinds together (about
	// 200 bytes each). Once a prune finds that many live ones, new keys go
	// unrecorded until a prune finds room; an address that cannot be
	// recorded counts as one that failed lately, so a guesser with that
	// many addresses meets the account's record with each of them.
	maxTracked = 300_000
	// maxRemembered bounds the waits an instance remembers.
	maxRemembered = 100_000
)

// The kinds of record.
const (
	scopePair    = "pair"
	scopeAddress = "address"
	scopeAccount = "account"
)

// throttle is the rule of one kind of record: its free failures.
type throttle struct {
	scope string
	free  int
}

// strikes is one record as an attempt works on it.
type strikes struct {
	failures     int
	last         time.Time // of the last failure
	next         time.Time // no attempt before this
	pending      int       // attempts being checked now
	pendingUntil time.Time // when those stop counting
	changed      bool      // to be written back
	drop         bool      // to be deleted: a success cleared it
}

// loaded is a record read at now, with what time undid undone.
func loaded(r models.SignInRecord, now time.Time) *strikes {
	s := &strikes{failures: r.Failures, last: r.LastFailure, next: r.NextTry,
		pending: r.Pending, pendingUntil: r.PendingUntil}
	if s.pending > 0 && now.After(s.pendingUntil) {
		s.pending, s.changed = 0, true
	}
	if s.pending == 0 && now.Sub(s.last) > forgetAfter && !now.Before(s.next) && s.failures > 0 {
		*s = strikes{changed: true}
	}
	return s
}

// begin admits an attempt on r or says how long to wait. Past the free
// failures only one attempt at a time is checked, so a burst of concurrent
// guesses cannot all slip in before the first of them fails. seen says
// whether the key had failed lately or had an attempt being checked before
// this one; a key with no record (no name, or none could be made) counts
// as seen.
func (t throttle) begin(r *strikes, now time.Time) (wait time.Duration, ok, seen bool) {
	if r == nil {
		return 0, true, true
	}
	seen = r.failures > 0 || r.pending > 0
	if now.Before(r.next) {
		return r.next.Sub(now), false, seen
	}
	if r.failures+r.pending >= t.free && r.pending > 0 {
		return firstDelay, false, seen
	}
	r.pending++
	r.pendingUntil = now.Add(checkLease)
	r.changed = true
	return 0, true, seen
}

// waitFor is how long r's key must wait before its next attempt, or 0.
func (t throttle) waitFor(r *strikes, now time.Time) time.Duration {
	if r != nil && now.Before(r.next) {
		return r.next.Sub(now)
	}
	return 0
}

// end records how an attempt admitted by begin went; clear forgets the
// record after a success.
func (t throttle) end(r *strikes, now time.Time, failed, clear bool) {
	if r == nil {
		return
	}
	r.pending = max(r.pending-1, 0)
	r.changed = true
	switch {
	case failed:
		t.strike(r, now)
	case clear && r.pending == 0:
		r.drop = true
	}
}

// fail records a failure of an attempt begin did not admit: the account's
// record counts the failures of addresses it does not hold back.
func (t throttle) fail(r *strikes, now time.Time) {
	if r != nil {
		t.strike(r, now)
	}
}

func (t throttle) strike(r *strikes, now time.Time) {
	r.failures++
	r.last = now
	if over := r.failures - t.free; over >= 0 {
		r.next = now.Add(delayAfter(over))
	}
	r.changed = true
}

// delayAfter is the wait after the n-th failure past the free ones (n from 0).
func delayAfter(n int) time.Duration {
	if n >= 30 {
		return maxDelay
	}
	return min(firstDelay<<n, maxDelay)
}

// records are the records one attempt works on, by kind and key.
type records map[models.SignInKey]*strikes

// of is the record of key of t's kind; nil for no key, or a key that has
// no record.
func (rs records) of(t throttle, key string) *strikes {
	if key == "" {
		return nil
	}
	return rs[models.SignInKey{Scope: t.scope, Key: key}]
}

// ledger keeps the records in the database for every instance, and the
// waits this instance has seen in memory.
type ledger struct {
	store *models.Store

	mu        sync.Mutex
	waits     map[models.SignInKey]time.Time // a record's next try, as last seen here
	lastPrune time.Time
	full      bool // the last prune found maxTracked records
}

func newLedger(store *models.Store) *ledger {
	return &ledger{store: store, waits: map[models.SignInKey]time.Time{}}
}

// change runs fn on the records of keys, made where missing, in one
// transaction that holds them locked, and writes back what fn changed.
func (l *ledger) change(ctx context.Context, now time.Time, keys []models.SignInKey, fn func(records)) error {
	l.prune(ctx, now)
	l.mu.Lock()
	create := !l.full
	l.mu.Unlock()
	var done records
	err := l.store.Tx(ctx, func(tx *models.Store) error {
		rows, err := tx.SignInRecordsLocked(ctx, keys, create)
		if err != nil {
			return err
		}
		rs := records{}
		for _, row := range rows {
			rs[models.SignInKey{Scope: row.Scope, Key: row.Key}] = loaded(row, now)
		}
		fn(rs)
		for k, r := range rs {
			switch {
			case r.drop:
				err = tx.DeleteSignInRecord(ctx, k)
			case r.changed:
				err = tx.SaveSignInRecord(ctx, &models.SignInRecord{Scope: k.Scope, Key: k.Key, Failures: r.failures,
					LastFailure: r.last, NextTry: r.next, Pending: r.pending, PendingUntil: r.pendingUntil})
			}
			if err != nil {
				return err
			}
		}
		done = rs
		return nil
	})
	if err != nil {
		return err
	}
	l.remember(done, now)
	return nil
}

// remember notes the waits of rs as they now stand.
func (l *ledger) remember(rs records, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, r := range rs {
		if r.drop || !now.Before(r.next) {
			delete(l.waits, k)
			continue
		}
		if _, known := l.waits[k]; !known && len(l.waits) >= maxRemembered {
			for k, next := range l.waits {
				if !now.Before(next) {
					delete(l.waits, k)
				}
			}
			if len(l.waits) >= maxRemembered {
				continue
			}
		}
		l.waits[k] = r.next
	}
}

// waitSeen is how long key of t's kind must still wait as this instance
// last saw its record, or 0. A record's next try only moves later while
// the record lives, and it is forgotten or cleared only once that time has
// passed, so a wait seen here is never longer than the record's own.
func (l *ledger) waitSeen(t throttle, key string, now time.Time) time.Duration {
	if key == "" {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next, ok := l.waits[models.SignInKey{Scope: t.scope, Key: key}]
	if !ok || !now.Before(next) {
		return 0
	}
	return next.Sub(now)
}

// prune deletes the forgotten records, at most once every pruneEvery on
// this instance, and notes whether the records are full. A failed prune is
// tried again at the next attempt.
func (l *ledger) prune(ctx context.Context, now time.Time) {
	l.mu.Lock()
	due := now.Sub(l.lastPrune) >= pruneEvery
	if due {
		l.lastPrune = now
	}
	l.mu.Unlock()
	if !due {
		return
	}
	left, err := l.store.PruneSignInRecords(ctx, now, now.Add(-forgetAfter))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.lastPrune = time.Time{}
		return
	}
	l.full = left >= maxTracked
}

// clientKey is the name the throttles and the hashing queue know a client
// address by. An IPv6 address stands for its /64: one subscriber is commonly
// given a whole /64, and could otherwise try from 2^64 addresses, each with
// records of its own. Anything that is not an IP address is used as it is.
func clientKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(64)
	if err != nil {
		return addr
	}
	return p.String()
}

// hashGate lets at most n argon2 computations run at once: each takes
// 19 MiB and a core, so an unbounded burst of sign-ins would take the
// server's memory and every core from everyone else. Callers waiting for a
// slot queue per client address, and free slots go to the addresses in
// turn, so a flood from one address cannot make another's sign-in wait
// behind all of it: it waits for at most one hash of each address ahead.
type hashGate struct {
	mu      sync.Mutex
	free    int                      // slots nobody holds; never above 0 while anyone waits
	waiting map[string][]*hashWaiter // by address, first come first
	turns   []string                 // addresses with waiters, the next to be served first

	running atomic.Int64
	peak    atomic.Int64 // the most ever running at once, for tests
	// granted, when a test sets it before any sign-in, is told whose
	// queue each slot went to, in the order they went.
	granted func(key string)
}

// hashWaiter is one caller waiting for a slot; ready is closed when a slot
// is handed to it.
type hashWaiter struct{ ready chan struct{} }

func newHashGate(n int) *hashGate {
	return &hashGate{free: max(n, 1), waiting: map[string][]*hashWaiter{}}
}

// run computes fn in a free slot, waiting for one in key's queue as long as
// ctx lasts.
func (g *hashGate) run(ctx context.Context, key string, fn func()) error {
	if err := g.acquire(ctx, key); err != nil {
		return err
	}
	defer g.release()
	if g.granted != nil {
		g.granted(key)
	}
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	fn()
	return nil
}

func (g *hashGate) acquire(ctx context.Context, key string) error {
	g.mu.Lock()
	if g.free > 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	w := &hashWaiter{ready: make(chan struct{})}
	if len(g.waiting[key]) == 0 {
		g.turns = append(g.turns, key)
	}
	g.waiting[key] = append(g.waiting[key], w)
	g.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-w.ready:
		// The slot came as the caller gave up: it goes to the next.
		g.mu.Unlock()
		g.release()
	default:
		g.leave(key, w)
		g.mu.Unlock()
	}
	return fmt.Errorf("auth: waiting to check a password: %w", ctx.Err())
}

// release hands the slot to the first waiter of the address whose turn it
// is, which goes to the back of the turns if it has more waiters.
func (g *hashGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.turns) == 0 {
		g.free++
		return
	}
	key := g.turns[0]
	g.turns = g.turns[1:]
	queue := g.waiting[key]
	w := queue[0]
	if len(queue) == 1 {
		delete(g.waiting, key)
	} else {
		g.waiting[key] = queue[1:]
		g.turns = append(g.turns, key)
	}
	close(w.ready)
}

// leave takes a waiter that gave up out of key's queue. g.mu is held.
func (g *hashGate) leave(key string, w *hashWaiter) {
	queue := g.waiting[key]
	for i, q := range queue {
		if q == w {
			queue = append(queue[:i:i], queue[i+1:]...)
			break
		}
	}
	if len(queue) > 0 {
		g.waiting[key] = queue
		return
	}
	delete(g.waiting, key)
	for i, k := range g.turns {
		if k == key {
			g.turns = append(g.turns[:i:i], g.turns[i+1:]...)
			break
		}
	}
}
