package limits

import (
	"errors"
	"sync"
	"testing"
)

var errFull = errors.New("full")

func TestGateBoundsPerKeyAndInAll(t *testing.T) {
	g := NewGate[string](2, 3, errFull)
	a1, err := g.Enter("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Enter("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Enter("a"); !errors.Is(err, errFull) {
		t.Fatalf("third place of one key: %v, want refused", err)
	}
	if _, err := g.Enter("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Enter("c"); !errors.Is(err, errFull) {
		t.Fatalf("fourth place in all: %v, want refused", err)
	}
	a1()
	a1() // a second release must not free a place someone else holds
	if g.Held("a") != 1 {
		t.Fatalf("a holds %d after one release twice, want 1", g.Held("a"))
	}
	if _, err := g.Enter("c"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := g.Enter("d"); !errors.Is(err, errFull) {
		t.Fatalf("a double release freed a second place: %v", err)
	}
}

// TestGateUnderConcurrency: however many enter at once, no more than the
// bound get in.
func TestGateUnderConcurrency(t *testing.T) {
	g := NewGate[int](5, 0, errFull)
	var wg sync.WaitGroup
	var mu sync.Mutex
	in := 0
	for range 100 {
		wg.Go(func() {
			if _, err := g.Enter(1); err == nil {
				mu.Lock()
				in++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if in != 5 {
		t.Fatalf("%d entered, want 5", in)
	}
}

// Held is how many places key holds now.
func (g *Gate[K]) Held(key K) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[key]
}
