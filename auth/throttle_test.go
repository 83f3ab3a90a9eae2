package auth_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"atelier/auth"
	"atelier/fault"
	"atelier/testrig/dbtest"
	"atelier/testrig/wait"
)

// testClock is a clock moved only by the test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func throttledService(t *testing.T) (*auth.Service, *testClock) {
	t.Helper()
	clk := &testClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	svc, err := auth.NewService(dbtest.Store(t), clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateUser(context.Background(), "ann", "password-ann", false); err != nil {
		t.Fatal(err)
	}
	return svc, clk
}

// waitOf is the wait a throttled sign-in asks for, or fails the test.
func waitOf(t *testing.T, err error) time.Duration {
	t.Helper()
	var tm *auth.TooManyAttemptsError
	if !errors.As(err, &tm) || !errors.Is(err, auth.ErrTooManyAttempts) {
		t.Fatalf("want too many attempts, got %v", err)
	}
	f := tm.Fault()
	if f.Kind != fault.Limit || f.Reason != "too_many_attempts" || f.RetryAfter != tm.Wait || tm.Wait <= 0 {
		t.Fatalf("throttled fault: %+v", f)
	}
	return tm.Wait
}

// A wrong password slows the address it came from on that account, never
// the account for everyone: while one address keeps the account under a
// siege (a wrong password each time its wait ends), the owner signs in from
// another address at every step, without waiting. The siege's own waits
// grow and stop at their ceiling.
func TestWrongPasswordsSlowOnlyTheirAddress(t *testing.T) {
	svc, clk := throttledService(t)
	ctx := context.Background()
	const attacker, owner = "203.0.113.9", "192.0.2.7"
	login := func(password, addr string) error {
		_, _, _, err := svc.Login(ctx, "ann", password, addr)
		return err
	}
	for i := range 5 {
		if err := login("wrong", attacker); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d: %v", i, err)
		}
	}
	if w := waitOf(t, login("password-ann", attacker)); w != time.Second {
		t.Fatalf("first wait of the failing address %v, want 1s", w)
	}
	if err := login("password-ann", owner); err != nil {
		t.Fatalf("the owner from another address, during the wait: %v", err)
	}
	clk.Advance(time.Second)
	if err := login("wrong", attacker); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("after the wait the password is checked again: %v", err)
	}
	if w := waitOf(t, login("wrong", attacker)); w != 2*time.Second {
		t.Fatalf("second wait %v, want 2s: delays grow", w)
	}
	// The siege: a wrong password each time the wait ends, which is when
	// the wait said.
	var longest time.Duration
	for i := range 30 {
		wait := waitOf(t, login("wrong", attacker))
		if wait > 15*time.Minute {
			t.Fatalf("wait %v past the ceiling (try %d)", wait, i)
		}
		longest = max(longest, wait)
		if err := login("password-ann", owner); err != nil {
			t.Fatalf("the owner during the siege (try %d): %v", i, err)
		}
		clk.Advance(wait)
		if err := login("wrong", attacker); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("try %d, once the wait is over: %v", i, err)
		}
	}
	if longest != 15*time.Minute {
		t.Fatalf("the longest wait of a long siege is %v, want the 15 min ceiling", longest)
	}
	if err := login("password-ann", owner); err != nil {
		t.Fatalf("the owner after the siege: %v", err)
	}
	// The besieging address itself, even with the right password, waits.
	waitOf(t, login("password-ann", attacker))
}

// A guesser with many addresses gets one try from each; from then on each
// of them shares the account's wait, which grows with the failures of all.
// The owner signs in from an address that has not failed; from one where
// they mistyped during the siege they wait, at most the ceiling. An
// unknown name is answered the same way at every step.
func TestThrottleBoundsAGuesserWithManyAddresses(t *testing.T) {
	svc, clk := throttledService(t)
	ctx := context.Background()
	for k, name := range []string{"ann", "nobody"} {
		for i := range 40 {
			_, _, _, err := svc.Login(ctx, name, "wrong", fmt.Sprintf("198.51.%d.%d", 100+k, i))
			if !errors.Is(err, auth.ErrBadCredentials) {
				t.Fatalf("%s: first try from address %d: %v", name, i, err)
			}
		}
		for i := range 40 {
			_, _, _, err := svc.Login(ctx, name, "wrong", fmt.Sprintf("198.51.%d.%d", 100+k, i))
			if w := waitOf(t, err); w != 15*time.Minute {
				t.Fatalf("%s: second try from address %d waits %v, want the account's 15 min", name, i, w)
			}
		}
	}
	if _, _, _, err := svc.Login(ctx, "ann", "password-ann", "192.0.2.7"); err != nil {
		t.Fatalf("the owner from a clean address: %v", err)
	}
	const typo = "192.0.2.8"
	if _, _, _, err := svc.Login(ctx, "ann", "wrong-once", typo); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("the owner's typo: %v", err)
	}
	_, _, _, err := svc.Login(ctx, "ann", "password-ann", typo)
	wait := waitOf(t, err)
	if wait > 15*time.Minute {
		t.Fatalf("the owner who mistyped waits %v, past the ceiling", wait)
	}
	clk.Advance(wait)
	if _, _, _, err := svc.Login(ctx, "ann", "password-ann", typo); err != nil {
		t.Fatalf("the owner who mistyped, after the wait: %v", err)
	}
}

// Addresses of one IPv6 /64 share their records: a subscriber given a /64
// cannot try from each of its addresses in turn. Another /64 is another
// client, and an IPv4 address written as IPv6 is the IPv4 address.
func TestThrottleCountsIPv6PerSlash64(t *testing.T) {
	svc, _ := throttledService(t)
	ctx := context.Background()
	for i := range 20 {
		_, _, _, err := svc.Login(ctx, fmt.Sprintf("user%d", i), "wrong", fmt.Sprintf("2001:db8:0:1::%x", i+1))
		if !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d: %v", i, err)
		}
	}
	_, _, _, err := svc.Login(ctx, "ann", "password-ann", "2001:db8:0:1:ffff:ffff:ffff:ffff")
	waitOf(t, err)
	if _, _, _, err := svc.Login(ctx, "ann", "password-ann", "2001:db8:0:2::1"); err != nil {
		t.Fatalf("another /64: %v", err)
	}
	for addr, want := range map[string]string{
		"::ffff:192.0.2.1":   "192.0.2.1",
		"192.0.2.1":          "192.0.2.1",
		"2001:db8::1":        "2001:db8::/64",
		"fe80::1%eth0":       "fe80::/64",
		"not an address":     "not an address",
		"2001:db8:1:2:3::17": "2001:db8:1:2::/64",
	} {
		if got := auth.ClientKey(addr); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

// One address guessing many accounts is throttled too, and other
// addresses are not.
func TestThrottlePerAddress(t *testing.T) {
	svc, clk := throttledService(t)
	ctx := context.Background()
	const attacker = "203.0.113.9"
	for i := range 20 {
		_, _, _, err := svc.Login(ctx, fmt.Sprintf("user%d", i), "wrong", attacker)
		if !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d: %v", i, err)
		}
	}
	_, _, _, err := svc.Login(ctx, "ann", "password-ann", attacker)
	wait := waitOf(t, err)
	if _, _, _, err := svc.Login(ctx, "ann", "password-ann", "192.0.2.1"); err != nil {
		t.Fatalf("another address is throttled too: %v", err)
	}
	clk.Advance(wait)
	if _, _, _, err := svc.Login(ctx, "ann", "password-ann", attacker); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
	// The success did not clear the address: its next failure waits longer.
	svc.Login(ctx, "bob", "wrong", attacker)
	_, _, _, err = svc.Login(ctx, "bob", "wrong", attacker)
	if w := waitOf(t, err); w <= wait {
		t.Fatalf("wait after the address's next failure %v, want more than %v", w, wait)
	}
}

// A burst of concurrent wrong passwords computes at most one hash per core
// at once: each takes 19 MiB.
func TestLoginHashesAFewAtATime(t *testing.T) {
	svc, _ := throttledService(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			// Distinct names and addresses: no throttle steps in.
			_, _, _, err := svc.Login(context.Background(), fmt.Sprintf("guess%d", i), "wrong", fmt.Sprintf("10.0.%d.1", i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("concurrent wrong password: %v", err)
		}
	}
	if peak := svc.PeakHashes(); peak < 1 || peak > int64(runtime.NumCPU()) {
		t.Fatalf("%d hashes ran at once, want at most %d", peak, runtime.NumCPU())
	}
}

// Hashing slots go to the waiting addresses in turn: a flood of sign-ins
// from one address, all waiting for a slot, delays another address's
// sign-in by at most one of its hashes. Every slot but one stays held, so
// hashes run one at a time, in the order the gate gives the slot.
func TestHashingIsFairBetweenAddresses(t *testing.T) {
	svc, _ := throttledService(t)
	ctx := context.Background()
	var releases []func()
	for range runtime.NumCPU() {
		releases = append(releases, svc.HoldHashSlot())
	}
	// The order the slots go in, not the order sign-ins finish: a
	// successful one does more after its hash than a failed one.
	var mu sync.Mutex
	var order []string
	flooder, other := auth.ClientKey("203.0.113.66"), auth.ClientKey("192.0.2.1")
	svc.OnHashSlot(func(key string) {
		mu.Lock()
		defer mu.Unlock()
		switch key {
		case flooder:
			order = append(order, "flood")
		case other:
			order = append(order, "ann")
		}
	})
	waitFor := func(n int) {
		t.Helper()
		wait.ForNil(t, wait.Long, fmt.Sprintf("%d sign-ins to wait for a slot", n), func() error {
			if got := svc.HashesWaiting(); got < n {
				return fmt.Errorf("%d wait", got)
			}
			return nil
		})
	}
	// As many as the flooding address may have checked at once.
	const flood = 19
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() {
			_, _, _, err := svc.Login(ctx, fmt.Sprintf("guess%d", i), "wrong", "203.0.113.66")
			if !errors.Is(err, auth.ErrBadCredentials) {
				t.Errorf("flood sign-in %d: %v", i, err)
			}
		})
	}
	waitFor(flood)
	wg.Go(func() {
		if _, _, _, err := svc.Login(ctx, "ann", "password-ann", "192.0.2.1"); err != nil {
			t.Errorf("the other address's sign-in: %v", err)
		}
	})
	waitFor(flood + 1)
	releases[0]()
	wg.Wait()
	for _, release := range releases[1:] {
		release()
	}
	for i, who := range order {
		if who == "ann" {
			if i > 1 {
				t.Fatalf("the other address's sign-in got a slot after %d of the flood's, want at most 1: %v", i, order)
			}
			return
		}
	}
	t.Fatalf("no sign-in of the other address: %v", order)
}

// A caller who gives up while waiting for a hashing slot is not left
// waiting, and leaves no place in the queue behind; a slot handed to a
// caller just as it gives up goes to the next, never lost.
func TestLoginWaitsForASlotOnlyAsLongAsTheRequest(t *testing.T) {
	svc, _ := throttledService(t)
	// hold takes n slots, or fails if they do not come: one was lost.
	hold := func(n int) []func() {
		t.Helper()
		held := make(chan func(), n)
		go func() {
			for range n {
				held <- svc.HoldHashSlot()
			}
		}()
		var releases []func()
		for range n {
			select {
			case r := <-held:
				releases = append(releases, r)
			case <-time.After(10 * time.Second):
				t.Fatalf("only %d of %d hashing slots came: a slot was lost", len(releases), n)
			}
		}
		return releases
	}
	releases := hold(runtime.NumCPU())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, _, err := svc.Login(ctx, "ann", "password-ann", "10.2.0.1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a sign-in that gave up waiting: %v", err)
	}
	if n := svc.HashesWaiting(); n != 0 {
		t.Fatalf("%d callers still wait for a slot", n)
	}
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error)
		go func() {
			_, _, _, err := svc.Login(ctx, "ann", "password-ann", "10.2.0.2")
			gaveUp <- err
		}()
		wait.For(t, wait.Short, "the sign-in to wait for a slot", func() bool { return svc.HashesWaiting() > 0 })
		go cancel()
		releases[0]()
		if err := <-gaveUp; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("a sign-in given up as a slot came: %v", err)
		}
		releases[0] = hold(1)[0]
	}
	for _, release := range releases {
		release()
	}
	for _, release := range hold(runtime.NumCPU()) {
		release()
	}
	if _, _, _, err := svc.Login(context.Background(), "ann", "password-ann", "10.2.0.1"); err != nil {
		t.Fatalf("a sign-in after the ones that gave up: %v", err)
	}
}

// Unknown and known names take the same time to refuse, so timing does not
// tell which names exist. Tries alternate, so a machine busy with other
// work slows both alike.
func TestLoginTimingHidesUnknownNames(t *testing.T) {
	svc, clk := throttledService(t)
	ctx := context.Background()
	var known, unknown time.Duration
	const tries = 20
	for i := range tries {
		clk.Advance(2 * time.Hour) // past every throttle
		start := time.Now()
		if _, _, _, err := svc.Login(ctx, "ann", "wrong-password", "192.0.2.1"); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatal(err)
		}
		known += time.Since(start)
		start = time.Now()
		if _, _, _, err := svc.Login(ctx, fmt.Sprintf("nobody%d", i), "wrong-password", "192.0.2.1"); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatal(err)
		}
		unknown += time.Since(start)
	}
	ratio := float64(unknown) / float64(known)
	t.Logf("mean known %v, unknown %v", known/tries, unknown/tries)
	if ratio < 0.7 || ratio > 1.43 {
		t.Fatalf("unknown names take %.2f× the time of known ones (known %v, unknown %v)", ratio, known/tries, unknown/tries)
	}
}

// instances are two auth services on one database, as two instances behind
// a balancer, with one clock.
func instances(t *testing.T) (a, b *auth.Service, clk *testClock) {
	t.Helper()
	clk = &testClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	store := dbtest.Store(t)
	var err error
	if a, err = auth.NewService(store, clk.Now); err != nil {
		t.Fatal(err)
	}
	if b, err = auth.NewService(store, clk.Now); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateUser(context.Background(), "ann", "password-ann", false); err != nil {
		t.Fatal(err)
	}
	return a, b, clk
}

// The bounds hold in total, whichever instance each attempt reaches: the
// free failures of an address on an account, spread over two instances,
// are five in all, and the waits grow with all of them; an address's
// twenty free failures over all accounts likewise. The owner from another
// address is held back by neither.
func TestThrottleHoldsAcrossInstances(t *testing.T) {
	a, b, clk := instances(t)
	ctx := context.Background()
	const attacker, owner = "203.0.113.9", "192.0.2.7"
	via := []*auth.Service{a, b}
	for i := range 5 {
		if _, _, _, err := via[i%2].Login(ctx, "ann", "wrong", attacker); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d: %v", i, err)
		}
	}
	for i, svc := range via {
		_, _, _, err := svc.Login(ctx, "ann", "password-ann", attacker)
		if w := waitOf(t, err); w != time.Second {
			t.Fatalf("instance %d: first wait %v, want 1s after five failures in all", i, w)
		}
	}
	if _, _, _, err := b.Login(ctx, "ann", "password-ann", owner); err != nil {
		t.Fatalf("the owner from another address: %v", err)
	}
	clk.Advance(time.Second)
	if _, _, _, err := a.Login(ctx, "ann", "wrong", attacker); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("after the wait: %v", err)
	}
	for i, svc := range via {
		_, _, _, err := svc.Login(ctx, "ann", "wrong", attacker)
		if w := waitOf(t, err); w != 2*time.Second {
			t.Fatalf("instance %d: second wait %v, want 2s", i, w)
		}
	}

	const sprayer = "198.51.100.1"
	for i := range 20 {
		_, _, _, err := via[i%2].Login(ctx, fmt.Sprintf("user%d", i), "wrong", sprayer)
		if !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d of the address: %v", i, err)
		}
	}
	for i, svc := range via {
		_, _, _, err := svc.Login(ctx, "someone", "wrong", sprayer)
		if w := waitOf(t, err); w != time.Second {
			t.Fatalf("instance %d: the address's first wait %v, want 1s after twenty failures in all", i, w)
		}
	}
}

// Past the free failures an account and address has one attempt checked
// at a time on all instances together, and an attempt whose instance died
// while checking it stops holding the next back after a minute.
func TestThrottleOneCheckAtATimeAcrossInstances(t *testing.T) {
	a, b, clk := instances(t)
	ctx := context.Background()
	const addr = "203.0.113.10"
	for i := range 4 {
		if _, _, _, err := a.Login(ctx, "ann", "wrong", addr); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d: %v", i, err)
		}
	}
	// The fifth, the last free one, is being checked on a; it never ends.
	if err := a.BeginSignIn(ctx, "ann", addr); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := b.Login(ctx, "ann", "password-ann", addr)
	if w := waitOf(t, err); w != time.Second {
		t.Fatalf("while another instance checks one: wait %v, want 1s", w)
	}
	clk.Advance(time.Minute + time.Second)
	if _, _, _, err := b.Login(ctx, "ann", "password-ann", addr); err != nil {
		t.Fatalf("once the dead instance's check stopped counting: %v", err)
	}
}

// The records are bounded in time: an hour after the last failure they
// hold nothing back and are deleted at the next attempt.
func TestThrottleRecordsArePruned(t *testing.T) {
	a, b, clk := instances(t)
	ctx := context.Background()
	for i := range 30 {
		a.Login(ctx, "ann", "wrong", fmt.Sprintf("198.51.100.%d", i))
	}
	n, err := b.SignInRecords(ctx)
	if err != nil || n < 30 {
		t.Fatalf("%d records after 30 addresses failed, %v", n, err)
	}
	clk.Advance(time.Hour + time.Minute) // the records' memory, and a prune's interval
	if _, _, _, err := b.Login(ctx, "ann", "password-ann", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.SignInRecords(ctx); err != nil || n > 3 {
		t.Fatalf("%d records an hour later, %v; want at most the last attempt's", n, err)
	}
}

// A refusal is cheap where floods land: once an instance has seen a
// client's wait, it refuses the client's further attempts within it
// without a statement to the database, and another instance learns the
// wait from the database at the first of them.
func TestThrottleRefusesFromMemoryWithinAWait(t *testing.T) {
	clk := &testClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	store, statements := dbtest.CountedStore(t)
	a, err := auth.NewService(store, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := auth.NewService(store, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const attacker = "203.0.113.11"
	for range 6 {
		a.Login(ctx, "ann", "wrong", attacker)
	}
	before := statements.SQL()
	_, _, _, err = b.Login(ctx, "ann", "wrong", attacker)
	waitOf(t, err)
	if statements.SQL() == before {
		t.Fatal("the other instance refused without reading the records")
	}
	before = statements.SQL() + statements.Control()
	for range 100 {
		_, _, _, err := b.Login(ctx, "ann", "wrong", attacker)
		waitOf(t, err)
	}
	if n := statements.SQL() + statements.Control() - before; n != 0 {
		t.Fatalf("100 refusals within a known wait sent %d statements", n)
	}
}
