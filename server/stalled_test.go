package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"atelier/events"
	"atelier/limits"
	"atelier/testrig/wait"
)

// stalled opens the stream at path as c over a TCP connection of its own,
// reads the response's head and never reads again: a reader that never
// reads. rcvbuf, unless 0, is its socket's receive buffer. The stream must
// have been admitted.
func (c *client) stalled(path string, rcvbuf int) net.Conn {
	c.h.t.Helper()
	u, _ := url.Parse(c.h.srv.URL)
	var cookies []string
	for _, k := range c.http.Jar.Cookies(u) {
		cookies = append(cookies, k.Name+"="+k.Value)
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		if rcvbuf == 0 {
			return nil
		}
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
	}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		c.h.t.Fatal(err)
	}
	c.h.t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nCookie: %s\r\n\r\n", path, u.Host, strings.Join(cookies, "; "))
	res, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
	if err != nil || res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("a stalled stream of %s was not admitted: %v %v", path, res, err)
	}
	conn.SetDeadline(time.Time{})
	return conn
}

// flood records count events as fast as PostgreSQL takes them, each with
// its number n and note bytes of padding, and returns when each recording
// began and ended (what it sets off may arrive before the end is read).
//
// With caughtUp, every floodSlack events it first waits (10 s at most)
// until caughtUp(i, at) says the honest reader has event i, whose
// recording began at at, floodSlack events before: on a machine busy with other tests, a reader
// that is merely late would otherwise fall past its stream's queue (256
// messages) and be dropped as a stalled one is, which is not what the
// tests look for. Stalled readers, which never read, fall behind all the
// same.
func flood(t *testing.T, h *harness, projectID int64, count, note int, caughtUp func(i int, at time.Time) bool) (began, ended []time.Time) {
	t.Helper()
	pad := strings.Repeat("n", note)
	began, ended = make([]time.Time, count), make([]time.Time, count)
	for i := range count {
		if caughtUp != nil && i >= floodSlack && i%floodSlack == 0 {
			if !wait.Until(wait.Span(10*time.Second), func() bool { return caughtUp(i-floodSlack, began[i-floodSlack]) }) {
				t.Fatalf("the honest reader did not have event %d within 10 s of event %d's recording", i-floodSlack, i-1)
			}
		}
		began[i] = time.Now()
		err := h.app.Events.Record(context.Background(), events.Event{Type: events.ChangeMoved, ProjectID: projectID,
			Data: map[string]any{"n": i, "note": pad}})
		if err != nil {
			t.Fatal(err)
		}
		ended[i] = time.Now()
	}
	return began, ended
}

// floodSlack is how far an honest reader may fall behind a flood.
const floodSlack = 100

// lines reads res's body line by line into a channel, with the time each
// arrived, until the body ends.
type line struct {
	text string
	at   time.Time
}

func lines(res *http.Response) <-chan line {
	ch := make(chan line, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			ch <- line{sc.Text(), time.Now()}
		}
	}()
	return ch
}

// numbered reads the events flood numbered from res's stream: when each
// arrived, and on read nil once all count did in order, else what went
// wrong. arrived is the reader's until read answers; has(i) says event i
// has arrived meanwhile.
func numbered(res *http.Response, count int) (arrived []time.Time, read <-chan error, has func(i int, _ time.Time) bool) {
	arrived = make([]time.Time, count)
	done := make(chan error, 1)
	var got atomic.Int64
	go func() {
		n := 0
		defer func() { got.Store(int64(n)) }()
		for l := range lines(res) {
			if _, data, ok := strings.Cut(l.text, `"n":`); ok && strings.HasPrefix(l.text, "data: ") {
				k, err := strconv.Atoi(data[:strings.IndexAny(data, ",}")])
				if err != nil || k != n {
					done <- fmt.Errorf("event %d arrived where %d was due", k, n)
					return
				}
				arrived[n] = l.at
				n++
				got.Store(int64(n))
				if n == count {
					done <- nil
					return
				}
			}
		}
		done <- fmt.Errorf("the stream ended after %d events", n)
	}()
	return arrived, done, func(i int, _ time.Time) bool { return got.Load() > int64(i) }
}

// A read-only member opens as many streams of the project's events as an
// account may and never reads them. 10,000 events later, each of about
// 600 bytes (3.9 MB queued used to freeze the project's stream for
// everyone), the owner's stream has had every event within a second of its
// recording, and the member's streams were dropped: their places are free
// again.
func TestStalledReadersOfProjectEvents(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("busy")
	reader := h.user("reader", false)
	owner.addMember(id, "reader", "member")
	path := "/projects/" + itoa(id) + "/events"
	for range limits.StreamsPerAccount {
		reader.stalled(path, 0)
	}
	res, _ := reader.openStream(path)
	expectRefusedStream(t, res)

	res, _ = owner.openStream(path)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("owner's stream: %d %s", res.StatusCode, readBody(res))
	}
	const count = 10_000
	arrived, read, has := numbered(res, count)
	start := time.Now()
	_, recorded := flood(t, h, id, count, 500, has)
	t.Logf("%d events recorded in %v", count, time.Since(start).Round(time.Millisecond))
	waitOrFail(t, read, 10*time.Second, "the owner's stream to have every event")
	worst := 0
	for i := range count {
		if arrived[i].IsZero() {
			t.Fatalf("event %d never arrived", i)
		}
		if arrived[i].Sub(recorded[i]) > arrived[worst].Sub(recorded[worst]) {
			worst = i
		}
	}
	late := arrived[worst].Sub(recorded[worst])
	t.Logf("the slowest event arrived %v after its recording", late.Round(time.Microsecond))
	if late > time.Second {
		t.Fatalf("event %d arrived %v after its recording", worst, late)
	}

	wait.For(t, wait.Long, "a stalled stream to free its place", func() bool {
		res, close := reader.openStream(path)
		defer close()
		return res.StatusCode == http.StatusOK
	})
}

// A site admin holds as many dashboard streams as an account may and
// reads none of them, with a socket that takes little (the hints are
// small). While 10,000 events happen, another admin's dashboard is told of
// each within a second, and the stalled dashboards are dropped: their
// places are free again. The hints are gathered for 10 µs instead of
// 100 ms, so each event becomes hints of its own, however fast the events
// come.
//
// A hint names no event, so the flood cannot tell how far behind the
// honest dashboard is, only that it still reads; each event makes up to
// two hints, and a reader starved on a loaded machine fell past the
// default queue of 256 and was dropped with a resync. The queue is made
// long enough for such a reader here: the stalled dashboards, whose
// sockets take nothing, are dropped by their write deadline all the same,
// and falling behind a queue is TestFallingBehindEndsWithResync's.
func TestStalledReadersOfDashboard(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Events.HintDelay = 10 * time.Microsecond
		c.Events.Queue = 1 << 16
	})
	root := h.user("root-admin", true)
	other := h.user("other-admin", true)
	for range limits.StreamsPerAccount {
		root.stalled("/admin/stream", 4096)
	}
	res, _ := root.openStream("/admin/stream")
	expectRefusedStream(t, res)

	res, _ = other.openStream("/admin/stream")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("other admin's dashboard stream: %d %s", res.StatusCode, readBody(res))
	}
	got := lines(res)
	var mu sync.Mutex
	var hints []time.Time
	var resync bool
	go func() {
		for l := range got {
			mu.Lock()
			switch l.text {
			case "event: " + events.TopicFeed:
				hints = append(hints, l.at)
			case "event: " + events.Resync:
				resync = true
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if resync {
			t.Error("the honest dashboard was dropped with a resync")
		}
	})
	const count = 10_000
	// The flood waits for a hint after the event floodSlack before.
	hinted := func(_ int, at time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hints) > 0 && hints[len(hints)-1].After(at)
	}
	began, recorded := flood(t, h, 0, count, 0, hinted)
	wait.For(t, wait.Short, "a hint after the last event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hints) > 0 && hints[len(hints)-1].After(began[len(began)-1])
	})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d feed hints for %d events", len(hints), count)
	// Each event is followed by a hint within a second of its recording.
	k := 0
	for i, at := range began {
		for k < len(hints) && !hints[k].After(at) {
			k++
		}
		if k == len(hints) || hints[k].Sub(recorded[i]) > time.Second {
			t.Fatalf("no hint within a second of event %d", i)
		}
	}

	wait.For(t, wait.Long, "a stalled dashboard to free its place", func() bool {
		res, close := root.openStream("/admin/stream")
		defer close()
		return res.StatusCode == http.StatusOK
	})
}

// Seven tabs of one terminal never read; an eighth reads. The shell
// prints 10,000 lines of 600 characters (6 MB): the reading tab gets every
// line in order with no pause of a second, the stalled ones are dropped,
// and the terminal takes a new viewer again.
func TestStalledViewersOfTerminal(t *testing.T) {
	needRoot(t)
	stalledViewersOfTerminal(t, newHarness(t))
}

func TestStalledViewersOfTerminalInAPod(t *testing.T) {
	needRoot(t)
	stalledViewersOfTerminal(t, newHarness(t, onKube(t)))
}

func stalledViewersOfTerminal(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	path := base + "/terminals/" + term.ID + "/stream"
	for range 7 {
		owner.stalled(path, 0)
	}
	res, _ = owner.openStream(path)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the reading viewer: %d %s", res.StatusCode, readBody(res))
	}
	ninth, _ := owner.openStream(path)
	expectRefusedStream(t, ninth)

	got := lines(res)
	const count = 10_000
	var worst time.Duration
	read := make(chan error, 1)
	go func() {
		var out []byte
		var event string
		n, last := 1, time.Time{}
		want := []byte(fmt.Sprintf("%0600d", n))
		for l := range got {
			switch {
			case strings.HasPrefix(l.text, "event: "):
				event = strings.TrimPrefix(l.text, "event: ")
				if event != "text" && event != "out" {
					read <- fmt.Errorf("the reading viewer got %s at line %d", event, n)
					return
				}
			case strings.HasPrefix(l.text, "data: "):
				b, _, err := outputOf(event, strings.TrimPrefix(l.text, "data: "))
				if err != nil {
					read <- err
					return
				}
				out = append(out, b...)
				for {
					i := bytes.Index(out, []byte("\r\n"))
					if i < 0 {
						break
					}
					// The first line follows the prompt's escapes.
					if bytes.HasSuffix(out[:i], want) {
						if !last.IsZero() {
							worst = max(worst, l.at.Sub(last))
						}
						last = l.at
						if n++; n > count {
							read <- nil
							return
						}
						want = fmt.Appendf(want[:0], "%0600d", n)
					}
					out = out[i+2:]
				}
			}
		}
		read <- fmt.Errorf("the reading viewer's stream ended at line %d", n)
	}()
	if res := owner.input(base, term.ID, term.NextSeq, "seq -f '%0600g' 1 10000\n"); res.StatusCode != http.StatusOK {
		t.Fatalf("input: %d %s", res.StatusCode, readBody(res))
	}
	waitOrFail(t, read, 60*time.Second, "every line on the reading viewer")
	t.Logf("the longest wait between two lines: %v", worst.Round(time.Microsecond))
	if worst > time.Second {
		t.Fatalf("the reading viewer waited %v between two lines", worst)
	}
	wait.For(t, wait.Long, "a stalled viewer to free its place", func() bool {
		res, close := owner.openStream(path)
		defer close()
		return res.StatusCode == http.StatusOK
	})
}

// waitOrFail waits for a reader's verdict, failing the test after wait.
func waitOrFail(t *testing.T, read <-chan error, wait time.Duration, what string) {
	t.Helper()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatalf("waited %v for %s", wait, what)
	}
}
