package events_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atelier/events"
	"atelier/models"
	"atelier/testrig/dbtest"
)

// project makes a project to record events of.
func project(t *testing.T, db *models.Store) int64 {
	t.Helper()
	ctx := context.Background()
	u := &models.User{Username: "ann", PasswordHash: "x"}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	p := &models.Project{Name: "p", WorkspaceDirName: "p", WorkspaceMode: models.ModeContainer}
	if err := db.CreateProject(ctx, p, u.ID); err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// paused opens the stream at url over a TCP connection of its own with a
// small receive buffer, reads the response's head and then nothing until
// the test reads br. The server's writes to it soon stop.
func paused(t *testing.T, url string) (net.Conn, io.Reader) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", addr)
	br := bufio.NewReaderSize(conn, 512)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", res, err)
	}
	return conn, res.Body
}

// seq finds an event's number in its data line.
var seq = regexp.MustCompile(`^data: .*?"n":(\d+)`)

// pad makes an event's data large, so a few hundred fill any socket.
var pad = strings.Repeat("x", 16<<10)

// A subscriber that stops reading never holds the others up: while it
// sits with its socket full, another receives every event within a second
// of its recording; the stopped one falls behind its queue, and when it
// reads again it gets what was written before that and then resync, and
// its stream ends. Nothing of either stream outlives Close.
func TestFallingBehindEndsWithResync(t *testing.T) {
	db := dbtest.Store(t)
	id := project(t, db)
	ctx := context.Background()
	noLeaks(t)
	r := events.New(db, slog.New(slog.DiscardHandler), events.Config{Queue: 32, WriteTimeout: time.Minute})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.ServeStream(w, req, events.ProjectStream(id))
	}))
	defer http.DefaultClient.CloseIdleConnections()
	defer r.Close()
	defer srv.Close()

	conn, slow := paused(t, srv.URL)
	defer conn.Close() // a failed test must not leave srv.Close waiting on it
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	type arrival struct {
		n  int
		at time.Time
	}
	got := make(chan arrival, 1024)
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if m := seq.FindSubmatch(line[:min(len(line), 200)]); m != nil {
				n, _ := strconv.Atoi(string(m[1]))
				got <- arrival{n, time.Now()}
			}
		}
		close(got)
	}()

	// 400 events of 16 KiB: more than the kernel and the queue take for
	// the stopped one.
	const count = 400
	recorded := make([]time.Time, count)
	for i := range count {
		recorded[i] = time.Now()
		if err := r.Record(ctx, events.Event{Type: events.ChangeMoved, ProjectID: id, Data: map[string]any{"n": i, "pad": pad}}); err != nil {
			t.Fatal(err)
		}
	}
	var worst time.Duration
	defer func() { t.Logf("the slowest event took %v", worst) }()
	for i := range count {
		select {
		case a, ok := <-got:
			if !ok {
				t.Fatalf("the reading subscriber's stream ended after %d events", i)
			}
			if a.n != i {
				t.Fatalf("event %d arrived as the %dth", a.n, i)
			}
			if late := a.at.Sub(recorded[i]); late > worst {
				worst = late
			}
			if late := a.at.Sub(recorded[i]); late > time.Second {
				t.Fatalf("event %d arrived %v after it was recorded", i, late)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d never came: the reading subscriber waited for the stopped one", i)
		}
	}

	// The stopped one reads again: the events written before it fell
	// behind, then resync, then the end.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var names []string
	sc := bufio.NewScanner(slow)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 || names[len(names)-1] != events.Resync {
		t.Fatalf("the stream that fell behind ended with %d events, the last %q; want resync last", len(names), names[max(len(names)-1, 0):])
	}
	if len(names)-1 >= count {
		t.Fatalf("it fell behind yet got all %d events", count)
	}
}

// A stream is refused once the Recorder is closed, before anything is
// written.
func TestClosedRecorderRefusesStreams(t *testing.T) {
	db := dbtest.Store(t)
	r := events.New(db, slog.New(slog.DiscardHandler), events.Config{})
	r.Close()
	w := httptest.NewRecorder()
	err := r.ServeStream(w, httptest.NewRequest(http.MethodGet, "/", nil), events.SiteStream)
	if !errors.Is(err, events.ErrClosed) || w.Body.Len() != 0 {
		t.Fatalf("stream after Close: %v, %q", err, w.Body.String())
	}
}
