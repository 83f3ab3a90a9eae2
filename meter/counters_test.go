package meter_test

import (
	"context"
	"testing"

	"atelier/meter"
)

func TestCountersAreThisMonthsOfProjectsThatRan(t *testing.T) {
	s, ids := newProjects(t, 3)
	clk := newClock(t0)
	m := meter.New(s, meter.DefaultCap, clk.Now)
	ctx := context.Background()
	setCap(t, s, ids[1], 10_000)

	// ids[0] ran last month only, ids[1] this month, ids[2] never.
	last, err := m.Reserve(ctx, ids[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Settle(ctx, last, t0, t0.Add(sec(10))); err != nil {
		t.Fatal(err)
	}
	now := t0.AddDate(0, 1, 0)
	clk.Set(now)
	done, err := m.Reserve(ctx, ids[1], "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Settle(ctx, done, now, now.Add(sec(30))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(ctx, ids[1], "a"); err != nil {
		t.Fatal(err)
	}

	cs, err := m.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 {
		t.Fatalf("counters %+v, want only the project that ran this month", cs)
	}
	c := cs[0]
	if c.ProjectID != ids[1] || c.Project != "p1" || c.UsedSeconds != 30+120 || c.ReservedSeconds != meter.Chunk || c.CapSeconds != 10_000 {
		t.Fatalf("counter %+v", c)
	}
}
