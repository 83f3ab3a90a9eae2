package auth

import (
	"context"
	"time"
)

// PeakHashes is the most password hashes s ever computed at once.
func (s *Service) PeakHashes() int64 { return s.hashing.peak.Load() }

// HoldHashSlot takes one of s's hashing slots, waiting for it, until
// release is called.
func (s *Service) HoldHashSlot() (release func()) {
	if err := s.hashing.acquire(context.Background(), "held by the test"); err != nil {
		panic(err)
	}
	return s.hashing.release
}

// OnHashSlot tells f whose queue each hashing slot goes to, in order; call
// it before any sign-in.
func (s *Service) OnHashSlot(f func(key string)) { s.hashing.granted = f }

// HashesWaiting is how many callers wait for a hashing slot.
func (s *Service) HashesWaiting() int {
	g := s.hashing
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, q := range g.waiting {
		n += len(q)
	}
	return n
}

// ClientKey is the name the throttles know addr by.
func ClientKey(addr string) string { return clientKey(addr) }

// BeginSignIn admits a sign-in attempt on the throttles and never settles
// it, as an instance that died while checking its password would.
func (s *Service) BeginSignIn(ctx context.Context, account, addr string) error {
	_, err := s.admit(ctx, account, clientKey(addr), s.now())
	return err
}

// SignInRecords is how many sign-in records the database holds: a prune
// as of the beginning of time deletes none and counts them all.
func (s *Service) SignInRecords(ctx context.Context) (int64, error) {
	return s.store.PruneSignInRecords(ctx, time.Time{}, time.Time{})
}
