package wait

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message instead of
// ending the test, so a failing wait can be looked at.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// A condition that comes true is met as soon as it does, not at the
// deadline: the point of waiting on a condition.
func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	begin := time.Now()
	r := &recorder{TB: t}
	For(r, Long, "the third look", func() bool { calls++; return calls == 3 })
	if r.failed != "" {
		t.Fatalf("the wait failed: %s", r.failed)
	}
	if calls != 3 {
		t.Errorf("the condition was asked %d times, want 3 (no more once it held)", calls)
	}
	if took := time.Since(begin); took > Long.Duration()/10 {
		t.Errorf("a condition true at its third look took %v to be seen", took)
	}
}

// A condition that never holds fails the test once the deadline passes,
// naming what was awaited and, for ForNil, the last reason given.
func TestForFailsNamingWhatItAwaited(t *testing.T) {
	span := Span(100 * time.Millisecond)
	r := &recorder{TB: t}
	begin := time.Now()
	For(r, span, "the moon", func() bool { return false })
	if took := time.Since(begin); took < span.Duration() {
		t.Errorf("gave up after %v, before its %v deadline", took, span.Duration())
	}
	if !strings.Contains(r.failed, "the moon") {
		t.Errorf("the failure %q does not say what was awaited", r.failed)
	}

	r = &recorder{TB: t}
	n := 0
	ForNil(r, span, "the tide", func() error { n++; return fmt.Errorf("still low (look %d)", n) })
	if !strings.Contains(r.failed, "the tide") || !strings.Contains(r.failed, fmt.Sprintf("look %d)", n)) {
		t.Errorf("the failure %q does not name the wait and its last reason (look %d)", r.failed, n)
	}
}

// The last moment counts: a condition first true at the deadline is met.
func TestUntilAsksAtTheDeadline(t *testing.T) {
	span := Span(50 * time.Millisecond)
	end := time.Now().Add(span.Duration())
	if !Until(span, func() bool { return !time.Now().Before(end) }) {
		t.Fatal("a condition that holds from the deadline on was missed")
	}
	if !Until(span, func() bool { return true }) || Until(span, func() bool { return false }) {
		t.Fatal("Until does not report whether the condition held")
	}
	var err error = errors.New("x")
	r := &recorder{TB: t}
	ForNil(r, span, "nil", func() error { e := err; err = nil; return e })
	if r.failed != "" {
		t.Fatalf("ForNil failed on a check that came good: %s", r.failed)
	}
}

// A slow machine stretches every deadline through the environment.
func TestScaleStretchesDeadlines(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{
		{"", 5 * time.Second},
		{"3", 15 * time.Second},
		{"0.5", 2500 * time.Millisecond},
		{"nonsense", 5 * time.Second},
		{"-2", 5 * time.Second},
	} {
		t.Setenv(ScaleEnv, c.env)
		if got := Short.Duration(); got != c.want {
			t.Errorf("%s=%q: Short is %v, want %v", ScaleEnv, c.env, got, c.want)
		}
	}
}
