package workbench

import (
	"errors"
	"testing"
)

// One person holds at most half the slots, rounded up, and is told it is
// their share; the rest go to others until the instance is full, a check
// (nobody's) counts only against the instance, and a released slot is
// free again.
func TestCommandSlots(t *testing.T) {
	for _, c := range []struct{ max, share int }{{1, 1}, {2, 1}, {3, 2}, {4, 2}, {5, 3}} {
		s := newCommandSlots(c.max)
		var releases []func()
		for range c.share {
			release, err := s.take(1)
			if err != nil {
				t.Fatalf("max %d: a slot within the share refused: %v", c.max, err)
			}
			releases = append(releases, release)
		}
		if _, err := s.take(1); !errors.Is(err, ErrSandboxBusyPerson) {
			t.Errorf("max %d: past the share of %d: %v", c.max, c.share, err)
		}
		for range c.max - c.share {
			release, err := s.take(nobody)
			if err != nil {
				t.Fatalf("max %d: a slot left for others refused: %v", c.max, err)
			}
			releases = append(releases, release)
		}
		if _, err := s.take(2); !errors.Is(err, ErrSandboxBusy) {
			t.Errorf("max %d: a full instance: %v", c.max, err)
		}
		releases[0]()
		if release, err := s.take(1); err != nil {
			t.Errorf("max %d: a released slot: %v", c.max, err)
		} else {
			release()
		}
	}
	if release, err := newCommandSlots(0).take(1); err != nil {
		t.Errorf("no bound: %v", err)
	} else {
		release()
	}
}
