package views

import (
	"strings"
	"testing"
	"time"
)

// A moment reads as how long ago it was, in its largest whole unit, and
// keeps the exact time for the hover.
func TestWhen(t *testing.T) {
	now := time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{
		{-5 * time.Second, "just now"},
		{10 * time.Second, "just now"},
		{50 * time.Second, "1 minute ago"},
		{2*time.Minute + 40*time.Second, "2 minutes ago"},
		{59*time.Minute + 59*time.Second, "59 minutes ago"},
		{time.Hour, "1 hour ago"},
		{23 * time.Hour, "23 hours ago"},
		{30 * time.Hour, "yesterday"},
		{3 * 24 * time.Hour, "3 days ago"},
		{90 * 24 * time.Hour, "on 10 December 2024"},
	} {
		if got := ago(now.Add(-tc.ago), now); got != tc.want {
			t.Errorf("%v before: %q, want %q", tc.ago, got, tc.want)
		}
	}
	html := string(whenAt(now.Add(-2*time.Minute), now))
	for _, want := range []string{`datetime="2025-03-10T11:58:00Z"`, `title="10 March 2025, 11:58:00 UTC"`, `>2 minutes ago</time>`} {
		if !strings.Contains(html, want) {
			t.Errorf("%s lacks %s", html, want)
		}
	}
}

func TestTook(t *testing.T) {
	for ms, want := range map[int64]string{0: "0 ms", 340: "340 ms", 2340: "2.3 s", 245_000: "4 min 05 s"} {
		if got := took(ms); got != want {
			t.Errorf("%d ms: %q, want %q", ms, got, want)
		}
	}
}
