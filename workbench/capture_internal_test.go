package workbench

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"atelier/sandbox"
)

// The capture's budget counts from the walk's first entry, not from the
// capture's start: a provider that must first start something (a pod's
// helper, through exec) gives it as long to look as one that walks at
// once; past the budget the walk stops and the report says so.
func TestCaptureBudgetCountsFromTheFirstEntry(t *testing.T) {
	const budget = 50 * time.Millisecond
	c := &capturer{ctx: context.Background(), budget: budget}
	// Not a path a capture takes: the visit counts it and goes on.
	mark := sandbox.Entry{Path: "../outside", Kind: sandbox.KindWhiteout}

	time.Sleep(2 * budget) // the provider's start
	if err := c.visit(mark); err != nil || c.rep.cut || c.entries != 1 {
		t.Fatalf("the first entry, a budget after the start: %v, cut %v, %d entries", err, c.rep.cut, c.entries)
	}
	if err := c.visit(mark); err != nil || c.rep.cut || c.entries != 2 {
		t.Fatalf("an entry within the budget: %v, cut %v, %d entries", err, c.rep.cut, c.entries)
	}
	time.Sleep(2 * budget)
	if err := c.visit(mark); err != fs.SkipAll || !c.rep.cut || c.entries != 2 {
		t.Fatalf("an entry past the budget: %v, cut %v, %d entries", err, c.rep.cut, c.entries)
	}
}
