package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"atelier/bus"
	"atelier/events"
	"atelier/models"
	"atelier/testrig/wait"
)

// A dashboard whose stream falls behind is dropped by the server, and the
// page reads its parts again: an event stored without any hint (so no
// part has a reason to fetch it) shows in the feed once the tab's stream
// is dropped. The tab's queue holds one message here, so a few hints at
// once are more than it takes.
func TestBrowserDashboardRereadsWhenDropped(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Events.Queue = 1 })
	h.user("root", true)
	ctx := browser(t)
	if err := do(ctx, signIn(h, "root", "password-root"), chromedp.Navigate(h.srv.URL+"/admin"), shows(`#feed`)); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	wait.For(t, wait.Long, "the tab to follow the live stream", func() bool { return h.app.Events.Followers() >= 1 })

	data, _ := json.Marshal(map[string]any{"from": "https://example.com/quiet.git"})
	if err := h.store.AddEvent(context.Background(), &models.Event{Type: "code.import", Data: data}); err != nil {
		t.Fatal(err)
	}
	feed := func() string {
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#feed`)))
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return text
	}
	// Not a wait: nothing is to happen, and this is the time a feed that
	// read without a hint would take to show the event.
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(feed(), "quiet.git") {
		t.Fatal("the feed showed an event nobody hinted at")
	}
	// Hints of every part but the feed, together: the tab's queue
	// overflows, so the server drops its stream.
	// A burst goes every half second while the feed has not read it.
	var burst time.Time
	wait.ForNil(t, wait.Long, "the feed to read the stored event again", func() error {
		if f := feed(); !strings.Contains(f, "quiet.git") {
			if time.Since(burst) >= 500*time.Millisecond {
				for _, topic := range []string{events.TopicMeters, events.TopicSessions, events.TopicTerminals, events.TopicCommands, events.TopicChanges} {
					h.app.Events.Hint(topic)
				}
				burst = time.Now()
			}
			return fmt.Errorf("it shows %q", f)
		}
		return nil
	})
	// The page follows the stream again.
	wait.For(t, wait.Long, "the tab to follow the live stream again", func() bool { return h.app.Events.Followers() >= 1 })
}

// When the database ends the bus's listener (a restart, a cut), the
// dashboard is told to resync and reads its parts again within 5 s: an
// event stored without any hint shows in the feed, and the tab follows the
// stream again.
func TestBrowserDashboardRereadsWhenTheBusListenerIsLost(t *testing.T) {
	h := newHarness(t)
	h.user("root", true)
	ctx := browser(t)
	if err := do(ctx, signIn(h, "root", "password-root"), chromedp.Navigate(h.srv.URL+"/admin"), shows(`#feed`)); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	wait.For(t, wait.Long, "the tab to follow the live stream", func() bool { return h.app.Events.Followers() >= 1 })

	data, _ := json.Marshal(map[string]any{"from": "https://example.com/quiet.git"})
	if err := h.store.AddEvent(context.Background(), &models.Event{Type: "code.import", Data: data}); err != nil {
		t.Fatal(err)
	}
	feed := func() string {
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#feed`)))
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return text
	}
	// Not a wait: nothing is to happen, and this is the time a feed that
	// read without a hint would take to show the event.
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(feed(), "quiet.git") {
		t.Fatal("the feed showed an event nobody hinted at")
	}
	if err := h.store.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = ?`, bus.Channel); err != nil {
		t.Fatal(err)
	}
	wait.ForNil(t, wait.Short, "the feed to read the stored event again", func() error {
		if f := feed(); !strings.Contains(f, "quiet.git") {
			return fmt.Errorf("it shows %q", f)
		}
		return nil
	})
	wait.For(t, wait.Long, "the tab to follow the live stream again", func() bool { return h.app.Events.Followers() >= 1 })
}
