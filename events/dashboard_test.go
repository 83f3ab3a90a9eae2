package events_test

import (
	"bufio"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"atelier/events"
	"atelier/testrig/dbtest"
)

// The dashboard stream: a burst of hints of one topic arrives as one hint,
// each topic as its own, an idle stream carries heartbeats, and nothing of
// the stream outlives Close.
func TestDashboardHintsGatherAndBeat(t *testing.T) {
	db := dbtest.Store(t)
	noLeaks(t)
	r := events.New(db, slog.New(slog.DiscardHandler), events.Config{Heartbeat: 700 * time.Millisecond})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.ServeStream(w, req, events.DashboardStream)
	}))
	defer http.DefaultClient.CloseIdleConnections()
	defer r.Close()
	defer srv.Close()

	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.Header.Get("X-Accel-Buffering") != "no" {
		t.Errorf("the stream lets proxies buffer it: %v", res.Header)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// next returns the next event name or comment, or "" after wait.
	next := func(wait time.Duration) string {
		timeout := time.After(wait)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return ""
				}
				if name, ok := strings.CutPrefix(l, "event: "); ok {
					return name
				}
				if strings.HasPrefix(l, ": ") {
					return l
				}
			case <-timeout:
				return ""
			}
		}
	}
	for range 10 {
		r.Hint(events.TopicMeters)
	}
	if got := next(time.Second); got != events.TopicMeters {
		t.Fatalf("first: %q, want one meters hint", got)
	}
	r.Hint(events.TopicSessions)
	r.Hint(events.TopicFeed)
	got := map[string]bool{next(time.Second): true, next(time.Second): true}
	if !got[events.TopicSessions] || !got[events.TopicFeed] || got[events.TopicMeters] {
		t.Fatalf("after a burst and two topics: %v; the burst must come once", got)
	}
	if got := next(2 * time.Second); got != ": ping" {
		t.Fatalf("an idle stream: %q, want a heartbeat", got)
	}
}
