package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"atelier/bus"
	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
	"atelier/testrig/wait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// noLeaks fails the test if a goroutine it started outlives it, once
// every cleanup (the buses' Close) has run.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// newBus is one instance's bus on db, closed at the end of the test.
func newBus(t *testing.T, db *models.Store, queue int) *bus.Postgres {
	t.Helper()
	b, err := bus.NewPostgres(context.Background(), bus.Options{Listener: db.Listener, Notify: db.Notify, Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func subscribe(t *testing.T, b bus.Bus, topics ...string) *bus.Subscription {
	t.Helper()
	s, err := b.Subscribe(topics...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// next is the subscription's next message, failing the test when none
// comes in time.
func next(t *testing.T, s *bus.Subscription) bus.Message {
	t.Helper()
	select {
	case m, ok := <-s.Messages():
		if !ok {
			t.Fatal("the subscription ended")
		}
		return m
	case <-time.After(wait.Short.Duration()):
		t.Fatal("no message came")
	}
	return bus.Message{}
}

func TestEveryInstanceHearsEachPublicationOnce(t *testing.T) {
	db := dbtest.Store(t)
	noLeaks(t)
	a, b := newBus(t, db, 0), newBus(t, db, 0)
	onA, onB := subscribe(t, a, "t"), subscribe(t, b, "t")
	other := subscribe(t, b, "other")
	ctx := context.Background()
	const n = 200
	for i := range n {
		from := a
		if i%2 == 1 {
			from = b
		}
		if err := from.Publish(ctx, "t", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(ctx, "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Each instance, the publisher's own included, hears every message
	// once and in the order they were sent; nothing else.
	for _, s := range []*bus.Subscription{onA, onB} {
		for i := range n {
			if m := next(t, s); m.Topic != "t" || string(m.Payload) != fmt.Sprintf("m%d", i) {
				t.Fatalf("message %d: got %s %q", i, m.Topic, m.Payload)
			}
		}
	}
	if m := next(t, other); string(m.Payload) != "x" {
		t.Fatalf("other topic: got %q", m.Payload)
	}
	time.Sleep(100 * time.Millisecond)
	for _, s := range []*bus.Subscription{onA, onB, other} {
		select {
		case m := <-s.Messages():
			t.Fatalf("a message too many: %s %q", m.Topic, m.Payload)
		case <-s.Gaps():
			t.Fatal("a gap where none was")
		default:
		}
	}
}

func TestAKilledListenerIsAGapForEverySubscriberAndComesBack(t *testing.T) {
	dsn := dbtest.DSN(t)
	db, err := models.Open(context.Background(), dsn, models.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	admin, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	noLeaks(t)
	a, b := newBus(t, db, 0), newBus(t, db, 0)
	subs := []*bus.Subscription{subscribe(t, a, "t"), subscribe(t, a, "u"), subscribe(t, b, "t")}
	ctx := context.Background()

	// The database ends both listeners' sessions, as a restart or a
	// network cut would.
	killed := time.Now()
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = '`+bus.Channel+`'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("terminated %d listeners, want 2", n)
	}
	for i, s := range subs {
		select {
		case <-s.Gaps():
		case <-time.After(5 * time.Second):
			t.Fatalf("subscriber %d was not told of the gap within 5 s", i)
		}
	}
	t.Logf("every subscriber told of the gap %v after the kill", time.Since(killed))
	// The gap is told once the listener is back: a publication now
	// reaches every subscriber.
	if err := a.Publish(ctx, "t", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "u", []byte("after")); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		if m := next(t, s); string(m.Payload) != "after" {
			t.Fatalf("subscriber %d: got %q", i, m.Payload)
		}
	}
	if d := time.Since(killed); d > 5*time.Second {
		t.Fatalf("the bus carried messages again only %v after the kill", d)
	}
}

func TestASubscriberThatNeverReadsIsGappedAndHoldsNobody(t *testing.T) {
	db := dbtest.Store(t)
	noLeaks(t)
	const queue = 8
	a := newBus(t, db, queue)
	stalled := subscribe(t, a, "t")
	reader := subscribe(t, a, "t")
	ctx := context.Background()
	// The reader takes each burst of a queue's worth before the next is
	// sent, so it never overflows; the stalled one overflows at the second.
	const bursts = 12
	for burst := range bursts {
		for i := range queue {
			if err := a.Publish(ctx, "t", fmt.Appendf(nil, "%d", burst*queue+i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range queue {
			if m := next(t, reader); string(m.Payload) != fmt.Sprint(burst*queue+i) {
				t.Fatalf("the reader got %q, want %d", m.Payload, burst*queue+i)
			}
		}
	}
	select {
	case <-reader.Gaps():
		t.Fatal("the reader was told of a gap")
	default:
	}
	select {
	case <-stalled.Gaps():
	default:
		t.Fatal("the subscriber that never reads was not told of its gap")
	}
	// It holds its queue's worth, the first ones, and no more.
	if len(stalled.Messages()) != queue {
		t.Fatalf("%d messages wait for the stalled subscriber, want %d", len(stalled.Messages()), queue)
	}
	if m := <-stalled.Messages(); string(m.Payload) != "0" {
		t.Fatalf("first queued: %q", m.Payload)
	}
	a.Close()
	for range stalled.Messages() {
	}
	if _, err := a.Subscribe("t"); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if err := a.Publish(ctx, "t", nil); !errors.Is(err, bus.ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
}

func TestPublishCarriesUpToMaxPayloadAndRefusesTheRest(t *testing.T) {
	db := dbtest.Store(t)
	noLeaks(t)
	a := newBus(t, db, 0)
	s := subscribe(t, a, "t")
	ctx := context.Background()
	full := strings.Repeat("é", (bus.MaxPayload-2)/2) // topic, newline, two bytes a rune
	if err := a.Publish(ctx, "t", []byte(full)); err != nil {
		t.Fatal(err)
	}
	if m := next(t, s); string(m.Payload) != full {
		t.Fatalf("a full payload came back as %d bytes", len(m.Payload))
	}
	if err := a.Publish(ctx, "t", []byte(full+"x")); !errors.Is(err, bus.ErrTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	for _, bad := range []struct{ topic, payload string }{
		{"", "x"}, {"a\nb", "x"}, {"t", "nul\x00"}, {"t", "\xff"},
	} {
		if err := a.Publish(ctx, bad.topic, []byte(bad.payload)); !errors.Is(err, bus.ErrBadMessage) {
			t.Errorf("%q %q: %v", bad.topic, bad.payload, err)
		}
	}
}

// A listener that hears nothing for Options.Idle checks its connection and
// goes on listening on it: no gap, nothing lost.
func TestAQuietListenerKeepsItsConnection(t *testing.T) {
	db := dbtest.Store(t)
	noLeaks(t)
	a, err := bus.NewPostgres(context.Background(), bus.Options{Listener: db.Listener, Notify: db.Notify, Idle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	s := subscribe(t, a, "t")
	time.Sleep(500 * time.Millisecond) // several checks
	if err := a.Publish(context.Background(), "t", []byte("still")); err != nil {
		t.Fatal(err)
	}
	if m := next(t, s); string(m.Payload) != "still" {
		t.Fatalf("got %q", m.Payload)
	}
	select {
	case <-s.Gaps():
		t.Fatal("a quiet listener told of a gap")
	default:
	}
}
