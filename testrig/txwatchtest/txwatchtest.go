// Package txwatchtest is a txwatch.Watcher for tests: it counts the
// transactions open in the contexts that carry it and lists the slow calls
// made while one is.
package txwatchtest

import (
	"context"
	"sync"

	"atelier/internal/txwatch"
)

// Watch counts the transactions open in the contexts that carry it and
// records the slow calls made meanwhile.
type Watch struct {
	mu   sync.Mutex
	open int
	seen []string // every slow call, in order
	inTx []string // those made while a transaction was open
}

var _ txwatch.Watcher = (*Watch)(nil)

// Attach returns ctx carrying a new Watch, and the Watch.
func Attach(ctx context.Context) (context.Context, *Watch) {
	w := &Watch{}
	return context.WithValue(ctx, txwatch.Key{}, txwatch.Watcher(w)), w
}

// Begin counts a transaction open until end is called.
func (w *Watch) Begin() (end func()) {
	w.mu.Lock()
	w.open++
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		w.open--
		w.mu.Unlock()
	}
}

// Slow records a slow call, and whether a transaction was open.
func (w *Watch) Slow(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, what)
	if w.open > 0 {
		w.inTx = append(w.inTx, what)
	}
}

// Seen lists every slow call made with the watched contexts, in order: a
// test shows with it that the path it watched did reach the store.
func (w *Watch) Seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// InTx lists the slow calls made while a transaction was open, in order.
func (w *Watch) InTx() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.inTx...)
}
