package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"atelier/limits"
	"atelier/testrig/wait"
)

// openStream starts an SSE request as c and returns its response once the
// headers are in; the stream stays open until the test ends or close is
// called.
func (c *client) openStream(path string) (res *http.Response, close func()) {
	c.h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.h.srv.URL+path, nil)
	req.Header.Set("Accept", "application/json") // an error answers as JSON; a stream is a stream
	res, err := c.http.Do(req)
	if err != nil {
		cancel()
		c.h.t.Fatal(err)
	}
	close = func() { cancel(); res.Body.Close() }
	c.h.t.Cleanup(close)
	return res, close
}

// expectRefusedStream asserts that a stream was refused with 429
// too_many_streams; a stream let through fails at once instead of being
// read forever.
func expectRefusedStream(t *testing.T, res *http.Response) {
	t.Helper()
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("stream past the bound: status %d (%s), want 429", res.StatusCode, res.Header.Get("Content-Type"))
	}
	expectProblem(t, res, http.StatusTooManyRequests, "too_many_streams")
}

// TestStreamsPerTerminalAreBounded: eight tabs may watch one terminal; the
// ninth is refused before streaming, with 429 too_many_streams.
func TestStreamsPerTerminalAreBounded(t *testing.T) {
	needRoot(t)
	streamsPerTerminalAreBounded(t, newHarness(t))
}

func TestStreamsPerTerminalAreBoundedInAPod(t *testing.T) {
	needRoot(t)
	streamsPerTerminalAreBounded(t, newHarness(t, onKube(t)))
}

func streamsPerTerminalAreBounded(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	url := base + "/terminals/" + term.ID + "/stream"
	var first func()
	for i := range 8 {
		res, close := owner.openStream(url)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("viewer %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
		if i == 0 {
			first = close
		}
	}
	ninth, _ := owner.openStream(url)
	expectRefusedStream(t, ninth)

	// A viewer that leaves makes room; the server notices it gone.
	first()
	wait.For(t, wait.Short, "a closed viewer to leave", func() bool {
		res, close := owner.openStream(url)
		defer close()
		return res.StatusCode == http.StatusOK
	})
}

// TestStreamsPerAccountAreBounded: an account holds at most 64 event
// streams at once, the admin event stream included; the 65th is a 429,
// another account is not affected, and a closed stream frees its place.
func TestStreamsPerAccountAreBounded(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root-admin", true)
	other := h.user("other-admin", true)
	var closers []func()
	for i := range limits.StreamsPerAccount {
		res, close := admin.openStream("/admin/events")
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
		closers = append(closers, close)
	}
	res, _ := admin.openStream("/admin/events")
	expectRefusedStream(t, res)

	if res, _ := other.openStream("/admin/events"); res.StatusCode != http.StatusOK {
		t.Fatalf("another account was refused: %d %s", res.StatusCode, readBody(res))
	}
	closers[0]()
	wait.For(t, wait.Short, "a closed stream to free its place", func() bool {
		res, close := admin.openStream("/admin/events")
		defer close()
		return res.StatusCode == http.StatusOK
	})
	for _, close := range closers[1:] {
		close()
	}
	// Every place comes back: the account holds all of them again.
	wait.For(t, wait.Long, "every place to be given back", func() bool {
		var again []func()
		defer func() {
			for _, close := range again {
				close()
			}
		}()
		for range limits.StreamsPerAccount {
			res, close := admin.openStream("/admin/events")
			again = append(again, close)
			if res.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	})
}

// Two instances serving together (a cluster secret) hold a person to one
// bound on streams in all: half of them open on each, the next is refused on either; one
// closed on A frees a place on B; and once an instance is declared gone,
// the streams it held count no more.
func TestStreamsPerAccountAreBoundedOnEveryInstanceTogether(t *testing.T) {
	secret := func(c *Config) { c.ClusterSecret = strings.Repeat("k", 32) }
	a := newHarness(t, secret)
	b := newHarnessOn(t, a.store, nil, secret)
	// Both live, as their starts record them; A started an hour ago.
	ctx, now := t.Context(), time.Now()
	for h, started := range map[*harness]time.Time{a: now.Add(-time.Hour), b: now} {
		if _, err := h.store.StartInstance(ctx, h.app.Instance, "place-"+h.app.Instance, "", started); err != nil {
			t.Fatal(err)
		}
	}
	a.user("root", true)
	onA, onB := a.signIn("root"), b.signIn("root")
	var onAClosers []func()
	for i := range limits.StreamsPerAccount {
		via := onB
		if i%2 == 0 {
			via = onA
		}
		res, close := via.openStream("/admin/events")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
		if via == onA {
			onAClosers = append(onAClosers, close)
		}
	}
	for _, via := range []*client{onA, onB} {
		res, _ := via.openStream("/admin/events")
		expectRefusedStream(t, res)
	}
	onAClosers[0]()
	wait.For(t, wait.Short, "a stream closed on A to free a place on B", func() bool {
		res, close := onB.openStream("/admin/events")
		defer close()
		return res.StatusCode == http.StatusOK
	})

	// What B's beat does once A's heartbeat is late: A's streams, 31
	// still open, count no more.
	if gone, err := b.store.DeclareLateGone(ctx, now.Add(-time.Minute), now); err != nil || len(gone) != 1 || gone[0] != a.app.Instance {
		t.Fatalf("declared gone: %v %v", gone, err)
	}
	// Each open may wait a moment: the probe above, closed, gives its
	// place back once its handler has returned. A refused open holds
	// none, and were A's streams still counted, B would get one more.
	for i := range limits.StreamsPerAccount / 2 {
		var last *http.Response
		if !wait.Until(wait.Short, func() bool {
			last, _ = onB.openStream("/admin/events")
			return last.StatusCode == http.StatusOK
		}) {
			t.Fatalf("stream %d on B once A is gone: %d %s", i+1, last.StatusCode, readBody(last))
		}
	}
}
