package events_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"atelier/bus"
	"atelier/events"
	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/wait"
)

// instance is one server's Recorder on the shared database: its own bus,
// and an HTTP server of its streams (/site, /dashboard).
type instance struct {
	rec *events.Recorder
	url string
}

func newInstance(t *testing.T, db *models.Store) *instance {
	t.Helper()
	b, err := bus.NewPostgres(context.Background(), bus.Options{Listener: db.Listener, Notify: db.Notify})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	rec, err := events.NewShared(db, slog.New(slog.DiscardHandler), events.Config{Queue: 1024}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec.ServeStream(w, req, strings.TrimPrefix(req.URL.Path, "/"))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return &instance{rec: rec, url: srv.URL}
}

// sse is one Server-Sent Event as it came, with when it came.
type sse struct {
	name, id, data string
	at             time.Time
}

// follow opens a stream and hands its events over until it ends (the
// channel closes).
func follow(t *testing.T, url string) <-chan sse {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("stream %s: %s", url, res.Status)
	}
	t.Cleanup(func() { res.Body.Close() })
	out := make(chan sse, 4096)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var e sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.name != "" {
					e.at = time.Now()
					out <- e
				}
				e = sse{}
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				e.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// nextEvent is the stream's next event; the test fails if none comes
// within d.
func nextEvent(t *testing.T, c <-chan sse, d time.Duration) sse {
	t.Helper()
	select {
	case e, ok := <-c:
		if !ok {
			t.Fatal("the stream ended")
		}
		return e
	case <-time.After(d):
		t.Fatalf("no event within %v", d)
	}
	return sse{}
}

// noLeaks fails the test if a goroutine it started outlives its cleanups.
// The test's database is closed by a cleanup that runs after this check, so
// a pool connection still reading then belongs to the pool, not the bus.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// The pool's reader waits deep in the network poller: its own frame
	// is anywhere on the stack, not at its top.
	pool := goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead")
	t.Cleanup(func() { goleak.VerifyNone(t, ignore, pool) })
}

// Two instances on one database: what A records, B's page hears, every
// event once and in order, and soon. A's own page hears it once too.
func TestAnEventRecordedOnOneInstanceReachesAnotherOnce(t *testing.T) {
	db := dbtest.Store(t)
	id := project(t, db)
	noLeaks(t)
	a, b := newInstance(t, db), newInstance(t, db)
	onB, onA := follow(t, b.url+"/"+events.SiteStream), follow(t, a.url+"/"+events.SiteStream)
	ctx := context.Background()

	const n = 500
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		if err := a.rec.Record(ctx, events.Event{Type: events.ChangeMoved, ProjectID: id, Data: map[string]any{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]<-chan sse{"B": onB, "A": onA} {
		latencies := make([]time.Duration, 0, n)
		seen := map[string]bool{}
		for i := range n {
			e := nextEvent(t, c, 5*time.Second)
			if e.name != events.ChangeMoved || !strings.Contains(e.data, fmt.Sprintf(`"n":%d}`, i)) {
				t.Fatalf("%s: event %d is %s %s", name, i, e.name, e.data)
			}
			if seen[e.id] {
				t.Fatalf("%s: event %s twice", name, e.id)
			}
			seen[e.id] = true
			latencies = append(latencies, e.at.Sub(sent[i]))
		}
		slices.Sort(latencies)
		p50, p99 := latencies[n/2], latencies[n*99/100]
		t.Logf("instance %s heard %d events recorded on A: p50 %v, p99 %v, max %v", name, n, p50, p99, latencies[n-1])
		// A coarse guard, not the figure: an event that waited for a poll
		// instead of the bus would take seconds, while two cores shared
		// with the rest of the tests stall a burst's tail for a quarter of
		// one. The figure (p99 ≤ 150 ms) is measured where nothing else
		// runs, and the README's comes from the server's
		// TestEventsOnOneInstanceReachViewersOnAnother.
		if limit := wait.Span(time.Second).Duration(); p99 > limit {
			t.Errorf("%s: p99 %v, over %v", name, p99, limit)
		}
	}
	// Nothing more, no repeat, no resync.
	select {
	case e := <-onB:
		t.Fatalf("B: one event too many: %s %s", e.name, e.data)
	case <-time.After(200 * time.Millisecond):
	}

	// A hint gathered on A refreshes B's dashboards; an event too large
	// for the bus reaches B whole, read from the table.
	dash := follow(t, b.url+"/"+events.DashboardStream)
	a.rec.Hint(events.TopicMeters)
	for e := nextEvent(t, dash, 5*time.Second); e.name != events.TopicMeters; e = nextEvent(t, dash, 5*time.Second) {
		// feed and changes hints of the events above may come first
	}
	big := strings.Repeat("é", bus.MaxPayload)
	if err := a.rec.Record(ctx, events.Event{Type: events.ChangeMoved, ProjectID: id, Data: map[string]any{"big": big}}); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, onB, 5*time.Second); !strings.Contains(e.data, big) {
		t.Fatalf("the large event came as %d bytes", len(e.data))
	}
}

// The database ends the listeners' connections: every stream on every
// instance ends with resync within 5 s, and a page that follows again
// hears what is recorded after.
func TestALostListenerEndsEveryStreamWithResync(t *testing.T) {
	dsn := dbtest.DSN(t)
	db, err := models.Open(context.Background(), dsn, models.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	admin, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	id := project(t, db)
	noLeaks(t)
	a, b := newInstance(t, db), newInstance(t, db)
	streams := []<-chan sse{
		follow(t, a.url+"/"+events.SiteStream), follow(t, b.url+"/"+events.SiteStream),
		follow(t, b.url+"/"+events.ProjectStream(id)), follow(t, b.url+"/"+events.DashboardStream),
	}
	ctx := context.Background()
	killed := time.Now()
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = '`+bus.Channel+`'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("terminated %d listeners: %v", n, err)
	}
	for i, s := range streams {
		if e := nextEvent(t, s, 5*time.Second); e.name != events.Resync {
			t.Fatalf("stream %d: %s %s", i, e.name, e.data)
		}
		if _, open := <-s; open {
			t.Fatalf("stream %d goes on after resync", i)
		}
	}
	t.Logf("every stream told to resync %v after the kill", time.Since(killed))
	again := follow(t, b.url+"/"+events.ProjectStream(id))
	if err := a.rec.Record(ctx, events.Event{Type: events.ChangeMoved, ProjectID: id, Data: map[string]any{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, again, 5*time.Second); e.name != events.ChangeMoved {
		t.Fatalf("after the resync: %s %s", e.name, e.data)
	}
}

// Whoever else may notify on the database cannot put a line of their own
// in a stream: a hint or an event type that is not a plain name is
// dropped, and the streams go on.
func TestAForgedNotificationWritesNoLineOfItsOwn(t *testing.T) {
	db := dbtest.Store(t)
	id := project(t, db)
	noLeaks(t)
	a := newInstance(t, db)
	site, dash := follow(t, a.url+"/"+events.SiteStream), follow(t, a.url+"/"+events.DashboardStream)
	ctx := context.Background()
	for _, forged := range []string{
		"hints\nmeters\nevent: forged",
		"events\n" + `{"id":1,"type":"change.moved\nevent: forged","data":{}}`,
	} {
		if err := db.Notify(ctx, bus.Channel, forged); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.rec.Record(ctx, events.Event{Type: events.ChangeMoved, ProjectID: id}); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, site, 5*time.Second); e.name != events.ChangeMoved || !strings.Contains(e.data, fmt.Sprintf(`"projectId":%d`, id)) {
		t.Fatalf("the site stream's first event: %s %s", e.name, e.data)
	}
	if e := nextEvent(t, dash, 5*time.Second); e.name == "forged" || e.name == events.TopicMeters {
		t.Fatalf("the dashboard carried the forged hint: %s", e.name)
	}
}
