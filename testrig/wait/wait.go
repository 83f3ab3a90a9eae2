// Package wait lets a test wait for the condition it needs rather than for
// a time it guesses: a fixed pause is either too short on a loaded machine
// (the test flakes) or longer than needed everywhere else (the suite
// crawls). A wait here polls the condition, returns as soon as it holds,
// and fails with what was awaited when its deadline passes first.
package wait

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Span is how long a wait may last before the test fails, before scaling.
type Span time.Duration

// The shared deadlines. Short is for what follows a request promptly (a
// process started, a row written, a stream delivered); Long is for what
// needs a checkout built, a command run or a server started first. A
// deadline is a bound on failure, never a pace: a passing test waits only
// as long as its condition takes.
const (
	Short = Span(5 * time.Second)
	Long  = Span(30 * time.Second)
)

// ScaleEnv names the environment variable that multiplies every deadline,
// for machines slow enough that even Long is too short (e.g. "3" under an
// emulator). Unset, empty or invalid means 1.
const ScaleEnv = "ATELIER_TEST_WAIT_SCALE"

// Duration is the span scaled by ScaleEnv.
func (s Span) Duration() time.Duration {
	f, err := strconv.ParseFloat(os.Getenv(ScaleEnv), 64)
	if err != nil || f <= 0 {
		f = 1
	}
	return time.Duration(float64(s) * f)
}

// The pause between two polls starts short, so a condition that holds
// almost at once costs almost nothing, and grows to a ceiling, so a long
// wait does not spin a core shared with the processes it waits on.
const (
	firstPoll = time.Millisecond
	maxPoll   = 25 * time.Millisecond
)

// Until polls cond until it holds or the span passes, and says whether it
// held. The condition is asked once more at the deadline, so a slow poll
// does not lose the last moment. For callers that decide themselves what a
// miss means; most want For.
func Until(within Span, cond func() bool) bool {
	deadline := time.Now().Add(within.Duration())
	for pause := firstPoll; ; pause = min(2*pause, maxPoll) {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(pause, time.Until(deadline)))
	}
}

// For waits until cond holds, failing the test with what it waited for
// (a phrase such as "the command to start") when the span passes first.
// Like t.Fatal, it must be called from the test's own goroutine.
func For(t testing.TB, within Span, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("waited %v for %s", within.Duration(), what)
	}
}

// ForNil waits until check returns nil, failing the test with what it
// waited for and the last error check gave when the span passes first:
// the last reason is usually what tells a flake from a bug.
func ForNil(t testing.TB, within Span, what string, check func() error) {
	t.Helper()
	var last error
	if !Until(within, func() bool { last = check(); return last == nil }) {
		t.Fatalf("waited %v for %s: %v", within.Duration(), what, last)
	}
}
