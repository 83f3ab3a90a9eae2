// Package txwatch lets a request's context tell that slow I/O (the object
// store, git, the sandbox) ran while one of its database transactions was
// open. A transaction holds one of the pool's few connections and often a
// row lock; anything slow inside it makes every request that needs the
// connection or the row wait for the slowest store. The rule is that
// transactions hold SQL only, and this is how tests see it kept: the store
// marks its transactions (Begin), the slow clients note their calls (Slow),
// and a Watcher a test put in the context under Key hears both
// (internal/txwatchtest).
//
// Without a Watcher, which production never sets, each mark is one
// context lookup.
package txwatch

import "context"

// Key is the context key of a Watcher.
type Key struct{}

// Watcher hears of the transactions and slow calls of the contexts that
// carry it.
type Watcher interface {
	// Begin is told a transaction opened; end, that it ended.
	Begin() (end func())
	// Slow is told of a slow call, what naming it.
	Slow(what string)
}

// Begin marks a transaction of ctx as open until the returned function is
// called. Transactions nest (savepoints).
func Begin(ctx context.Context) (end func()) {
	if w, ok := ctx.Value(Key{}).(Watcher); ok {
		return w.Begin()
	}
	return func() {}
}

// Slow notes a call to the object store, git or the sandbox made with ctx.
func Slow(ctx context.Context, what string) {
	if w, ok := ctx.Value(Key{}).(Watcher); ok {
		w.Slow(what)
	}
}
