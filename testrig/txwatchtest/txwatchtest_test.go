package txwatchtest_test

import (
	"context"
	"slices"
	"testing"

	"atelier/internal/txwatch"
	"atelier/testrig/txwatchtest"
)

// A slow call counts against the transactions open in its context only:
// before, between and after them it is seen but not held against them;
// nested transactions count until the outer one ends; a context without
// a watch records nothing anywhere.
func TestWatch(t *testing.T) {
	txwatch.Slow(context.Background(), "unwatched")
	defer txwatch.Begin(context.Background())()

	ctx, w := txwatchtest.Attach(context.Background())
	txwatch.Slow(ctx, "before")
	end := txwatch.Begin(ctx)
	inner := txwatch.Begin(context.WithoutCancel(ctx)) // a derived context shares the watch
	txwatch.Slow(ctx, "nested")
	inner()
	txwatch.Slow(ctx, "outer")
	end()
	txwatch.Slow(ctx, "after")

	if got, want := w.InTx(), []string{"nested", "outer"}; !slices.Equal(got, want) {
		t.Errorf("InTx = %q, want %q", got, want)
	}
	if got, want := w.Seen(), []string{"before", "nested", "outer", "after"}; !slices.Equal(got, want) {
		t.Errorf("Seen = %q, want %q", got, want)
	}
}
