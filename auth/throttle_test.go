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
	"atelier/internal/dbtest"
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

// A guesser of one account, even from many addresses, waits longer after
// each failure past the free ones; the owner gets in with the right password
// once the wait is over, and is never locked out for longer than the ceiling.
func TestThrottlePerAccount(t *testing.T) {
	svc, clk := throttledService(t)
	ctx := context.Background()
	guess := func(i int, password string) error {
		_, _, _, err := svc.Login(ctx, "ann", password, fmt.Sprintf("203.0.113.%d", i%250))
		return err
	}
	for i := range 5 {
		if err := guess(i, "wrong"); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d: %v", i, err)
		}
	}
	if w := waitOf(t, guess(5, "password-ann")); w != time.Second {
		t.Fatalf("first wait %v, want 1s", w)
	}
	clk.Advance(time.Second)
	if err := guess(6, "wrong"); !errors.Is(err, auth.ErrBadCredentials) {
		t.Fatalf("after the wait the password is checked again: %v", err)
	}
	if w := waitOf(t, guess(7, "wrong")); w != 2*time.Second {
		t.Fatalf("second wait %v, want 2s: delays grow", w)
	}
	// A long siege: the wait stops growing at its ceiling.
	var last time.Duration
	for i := range 30 {
		_, _, _, err := svc.Login(ctx, "ann", "wrong", "198.51.100.1")
		if errors.Is(err, auth.ErrBadCredentials) {
			continue
		}
		last = waitOf(t, err)
		if last > 15*time.Minute {
			t.Fatalf("wait %v past the ceiling (try %d)", last, i)
		}
		clk.Advance(last)
	}
	if last != 15*time.Minute {
		t.Fatalf("after a long siege the wait is %v, want the 15 min ceiling", last)
	}
	_, _, _, err := svc.Login(ctx, "ann", "password-ann", "192.0.2.7")
	if err != nil {
		clk.Advance(waitOf(t, err))
		_, _, _, err = svc.Login(ctx, "ann", "password-ann", "192.0.2.7")
	}
	if err != nil {
		t.Fatalf("the owner, after the wait: %v", err)
	}
	// A success clears the account's record.
	for i := range 5 {
		if err := guess(i, "wrong"); !errors.Is(err, auth.ErrBadCredentials) {
			t.Fatalf("free failure %d after a success: %v", i, err)
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

// A caller who gives up while waiting for a hashing slot is not left
// waiting.
func TestLoginWaitsForASlotOnlyAsLongAsTheRequest(t *testing.T) {
	svc, _ := throttledService(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Fill every slot first, so the cancelled sign-in has to wait.
	var wg sync.WaitGroup
	for i := range 4 * runtime.NumCPU() {
		wg.Go(func() { svc.Login(context.Background(), fmt.Sprintf("g%d", i), "wrong", fmt.Sprintf("10.1.%d.1", i)) })
	}
	_, _, _, err := svc.Login(ctx, "ann", "password-ann", "10.2.0.1")
	wg.Wait()
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled sign-in: %v", err)
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
