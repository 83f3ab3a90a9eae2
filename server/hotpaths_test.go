package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestHotPathRoundTrips holds the two requests that come most often to
// their cost in database round trips: a terminal's keystroke at most one on
// average (the sign-in's lookup; the shell's owner is checked in memory),
// and an editor's save at most five (sign-in, membership, the session's row
// touched and locked, the file's row with the count of changed paths, the
// write). BEGIN and COMMIT are counted apart and reported.
func TestHotPathRoundTrips(t *testing.T) {
	needRoot(t)
	hotPathRoundTrips(t, newHarness(t))
}

func TestHotPathRoundTripsInAPod(t *testing.T) {
	needRoot(t)
	hotPathRoundTrips(t, newHarness(t, onKube(t)))
}

func hotPathRoundTrips(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open a terminal: %d %s", res.StatusCode, readBody(res))
	}

	const keys = 200
	sql, control := h.statements.RequestSQL(), h.statements.Control()
	for i := range keys {
		res := owner.input(base, term.ID, uint64(i+1), "x")
		if res.StatusCode != http.StatusOK || res.Header.Get("X-Session-Idle-Deadline") == "" {
			t.Fatalf("key %d: %d %s", i, res.StatusCode, readBody(res))
		}
		res.Body.Close()
	}
	perKey := float64(h.statements.RequestSQL()-sql) / keys
	t.Logf("a keystroke: %.2f statements, %.2f BEGIN/COMMIT", perKey, float64(h.statements.Control()-control)/keys)
	if perKey > 1 {
		t.Errorf("a keystroke costs %.2f database round trips on average, want at most 1", perKey)
	}
	resize := url.Values{"cols": {"90"}, "rows": {"30"}}
	sql = h.statements.RequestSQL()
	if res := owner.post(base+"/terminals/"+term.ID+"/resize", resize, header{"X-CSRF-Token": owner.csrf}); res.StatusCode != http.StatusNoContent {
		t.Fatalf("resize: %d", res.StatusCode)
	}
	if n := h.statements.RequestSQL() - sql; n > 1 {
		t.Errorf("a resize costs %d round trips, want at most 1", n)
	}

	_, etag, status := owner.read(base, "src/main.go")
	if status != http.StatusOK {
		t.Fatalf("read: %d", status)
	}
	for i := range 10 {
		for _, path := range []string{"src/main.go", fmt.Sprintf("new/%d.txt", i)} {
			hdr := header{}
			if path == "src/main.go" {
				hdr["If-Match"] = etag
			}
			sql, control := h.statements.RequestSQL(), h.statements.Control()
			res := owner.put(base, path, fmt.Appendf(nil, "package main // %d\n", i), hdr)
			if res.StatusCode != http.StatusNoContent {
				t.Fatalf("save %s: %d %s", path, res.StatusCode, readBody(res))
			}
			if path == "src/main.go" {
				etag = res.Header.Get("ETag")
			}
			n := h.statements.RequestSQL() - sql
			if i == 0 {
				t.Logf("a save of %s: %d statements, %d BEGIN/COMMIT", path, n, h.statements.Control()-control)
			}
			if n > 5 {
				t.Errorf("saving %s costs %d database round trips, want at most 5", path, n)
			}
		}
	}
}

// TestTypingKeepsTheSessionAlive: keystrokes skip the session's row, so
// the next lease heartbeat writes them as the session's activity; a
// session in which someone types does not go idle.
func TestTypingKeepsTheSessionAlive(t *testing.T) {
	needRoot(t)
	typingKeepsTheSessionAlive(t, newHarness(t))
}

func TestTypingKeepsTheSessionAliveInAPod(t *testing.T) {
	needRoot(t)
	typingKeepsTheSessionAlive(t, newHarness(t, onKube(t)))
}

func typingKeepsTheSessionAlive(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	ctx := context.Background()
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open a terminal: %d %s", res.StatusCode, readBody(res))
	}
	h.clock.Advance(h.cfg.Sessions.Idle - time.Minute)
	typed := h.clock.Now()
	if res := owner.input(base, term.ID, 1, "x"); res.StatusCode != http.StatusOK {
		t.Fatalf("key: %d %s", res.StatusCode, readBody(res))
	}
	h.app.Shells.Heartbeat(ctx)
	h.clock.Advance(2 * time.Minute)
	if n, err := h.app.EditSessions.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("the sweep ended %d sessions (%v) a minute after a keystroke", n, err)
	}
	cs, err := h.store.SessionByID(ctx, s.ID)
	// PostgreSQL keeps microseconds.
	typed = typed.Truncate(time.Microsecond)
	if err != nil || cs.State != "open" || !cs.LastSeenAt.Equal(typed) {
		t.Fatalf("session after typing: %+v, %v; want open, last seen %v", cs, err, typed)
	}
	// A beat with no keys writes nothing.
	h.app.Shells.Heartbeat(ctx)
	if again, _ := h.store.SessionByID(ctx, s.ID); !again.LastSeenAt.Equal(typed) {
		t.Errorf("a quiet beat moved the activity to %v", again.LastSeenAt)
	}
}
