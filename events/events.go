// Package events records what happens in Atelier: each event is a row of the
// events table, and it is also published on a live bus of UI hints that
// pages follow over Server-Sent Events. The bus keeps nothing: a hint that
// nobody was listening for is gone (the table keeps the record). It never
// waits for a subscriber either: each has a bounded queue and a write
// deadline, and one that falls behind is told to read afresh (Resync) and
// dropped, so a reader that never reads costs nobody else anything.
//
// A Recorder made with NewShared publishes through a bus.Bus instead, and
// its streams follow what the bus brings, so every instance on the bus
// streams every instance's events and hints, its own once, as they come
// back through the bus. A gap the bus tells of ends every stream with
// Resync.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atelier/bus"
	"atelier/models"
)

// Event types.
const (
	SessionOpened = "code.session.opened"
	SessionClosed = "code.session.closed"
	// SessionSubmitted carries the changeId the session became.
	SessionSubmitted = "code.session.submitted"
	// A Change's steps; each carries its changeId and status.
	ChangeComposed = "change.composed"
	ChangeVerified = "change.verified"
	ChangeFailed   = "change.failed"
	ChangeReleased = "change.released"
	ChangeWaiting  = "change.waiting"
	ChangeMoved    = "change.moved" // withdrawn, superseded, re-composed, verifying
	// CodeImported is each admitted import, which the hourly bound counts;
	// it keeps its project in its data (see code.countImport).
	CodeImported = "code.import"
)

// SiteStream carries every event as JSON, for scripts of site admins
// (GET /admin/events).
const SiteStream = "site"

// DashboardStream carries refresh hints to open admin dashboards: each
// message is named after the part of the dashboard that changed (a Topic)
// and carries no data a page needs, so a hint that is missed costs only a
// refresh the next one brings.
const DashboardStream = "dashboard"

// Topics of DashboardStream.
const (
	TopicMeters    = "meters"
	TopicSessions  = "sessions"
	TopicTerminals = "terminals"
	TopicCommands  = "commands"
	TopicFeed      = "feed"
	TopicChanges   = "changes"
)

// ProjectStream names the stream of one project's events.
func ProjectStream(projectID int64) string { return "project-" + strconv.FormatInt(projectID, 10) }

// Event is something that happened.
type Event struct {
	Type      string
	ProjectID int64 // 0 for site-wide events
	ActorID   int64 // 0 for the system (a sweeper)
	Data      map[string]any
}

// Topics of the bus a shared Recorder publishes on.
const (
	// busEvents carries an event's row as JSON, or only its id when the
	// row is too large for the bus (the receiver reads it).
	busEvents = "events"
	// busHints carries a dashboard topic.
	busHints = "hints"
)

// publishTimeout bounds a publication on the bus; the event is stored
// already, so a bus that does not answer costs the caller this at most.
const publishTimeout = 5 * time.Second

// Recorder stores events and publishes them.
type Recorder struct {
	db  *models.Store
	cfg Config
	hub *hub
	log *slog.Logger

	// shared carries the publications when the Recorder follows a bus
	// (NewShared); sub is what the bus brings back, relayed into hub until
	// relayed closes.
	shared  bus.Bus
	sub     *bus.Subscription
	relayed chan struct{}

	mu      sync.Mutex
	pending map[string]bool // topics to hint at the next flush
	timer   *time.Timer     // the next flush, or the one running; nil when none is due
	closed  bool

	followers atomic.Int64 // requests in ServeStream
}

// New returns a Recorder whose streams carry what this process records;
// Close ends its streams.
func New(db *models.Store, log *slog.Logger, cfg Config) *Recorder {
	cfg = cfg.withDefaults()
	return &Recorder{db: db, cfg: cfg, hub: newHub(cfg.Queue), log: log, pending: map[string]bool{}}
}

// NewShared returns a Recorder that publishes its events and hints on b
// and whose streams carry everything published there, by any instance.
// Close ends its streams and its subscription, not b.
func NewShared(db *models.Store, log *slog.Logger, cfg Config, b bus.Bus) (*Recorder, error) {
	r := New(db, log, cfg)
	sub, err := b.Subscribe(busEvents, busHints)
	if err != nil {
		return nil, fmt.Errorf("events: follow the bus: %w", err)
	}
	r.shared, r.sub, r.relayed = b, sub, make(chan struct{})
	go r.relay()
	return r, nil
}

// relay hands what the bus brings to this instance's streams until the
// subscription ends.
func (r *Recorder) relay() {
	defer close(r.relayed)
	for {
		select {
		case m, ok := <-r.sub.Messages():
			if !ok {
				return
			}
			r.receive(m)
		case <-r.sub.Gaps():
			// Some publications never reached this instance: every page
			// reads afresh what it shows.
			r.log.Warn("events: messages of the bus were lost; every stream ends with resync")
			r.hub.resyncAll()
		}
	}
}

// What a message of the bus may name, as the events table's
// events_type_format and the dashboard's topics are written: a name goes on
// an SSE line as it is, so nothing else (a line break, say, from whoever
// else could notify on the database) may reach a stream.
var (
	typeFormat  = regexp.MustCompile(`^[a-z]+(\.[a-z_]+)+$`)
	topicFormat = regexp.MustCompile(`^[a-z]+$`)
)

// receive streams one message of the bus.
func (r *Recorder) receive(m bus.Message) {
	switch m.Topic {
	case busHints:
		if !topicFormat.Match(m.Payload) {
			r.log.Warn("events: a malformed hint on the bus, ignored", "hint", string(m.Payload))
			return
		}
		r.hub.publish(DashboardStream, hintMessage(string(m.Payload)))
	case busEvents:
		var row models.Event
		if err := json.Unmarshal(m.Payload, &row); err != nil {
			r.log.Warn("events: unreadable event on the bus", "err", err)
			r.hub.resyncAll()
			return
		}
		if row.Type == "" { // too large for the bus: only its id came
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			full, err := r.db.EventByID(ctx, row.ID)
			cancel()
			if err != nil {
				r.log.Warn("events: an event on the bus could not be read", "id", row.ID, "err", err)
				r.hub.resyncAll()
				return
			}
			row = *full
		}
		if !typeFormat.MatchString(row.Type) {
			r.log.Warn("events: an event of a malformed type on the bus, ignored", "id", row.ID)
			return
		}
		r.stream(&row)
	}
}

// Hint tells open dashboards that topic changed. It never blocks on them:
// hints are gathered for Config.HintDelay, so a burst of changes costs each
// dashboard one refresh, and then published once.
func (r *Recorder) Hint(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.pending[topic] = true
	if r.timer == nil {
		r.timer = time.AfterFunc(r.cfg.HintDelay, r.flushHints)
	}
}

// flushHints publishes the gathered hints. One flush runs at a time: the
// timer stays set while it publishes, so hints that come meanwhile wait
// for the next one, which starts a HintDelay after this one ends. However
// fast hints come, or slowly the bus takes them, one goroutine publishes.
func (r *Recorder) flushHints() {
	r.mu.Lock()
	topics := r.pending
	r.pending = map[string]bool{}
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return
	}
	for topic := range topics {
		if r.shared == nil {
			r.hub.publish(DashboardStream, hintMessage(topic))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		if err := r.shared.Publish(ctx, busHints, []byte(topic)); err != nil {
			r.log.Warn("events: a hint did not reach the bus", "topic", topic, "err", err)
		}
		cancel()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	if len(r.pending) > 0 && !r.closed {
		r.timer = time.AfterFunc(r.cfg.HintDelay, r.flushHints)
	}
}

func hintMessage(topic string) []byte {
	return []byte("event: " + topic + "\ndata: " + topic + "\n\n")
}

// Record appends e to the event log, then publishes it. A failure to store
// is returned; publishing never fails the caller.
func (r *Recorder) Record(ctx context.Context, e Event) error {
	data, err := json.Marshal(e.Data)
	if err != nil {
		return fmt.Errorf("events: %s: %w", e.Type, err)
	}
	row := &models.Event{Type: e.Type, Data: data}
	if e.ProjectID != 0 {
		row.ProjectID = &e.ProjectID
	}
	if e.ActorID != 0 {
		row.ActorID = &e.ActorID
	}
	if err := r.db.AddEvent(ctx, row); err != nil {
		return err
	}
	r.publish(ctx, row)
	r.Hint(TopicFeed)
	if e.Type == SessionOpened || e.Type == SessionClosed {
		r.Hint(TopicSessions)
	}
	if e.Type == SessionSubmitted || strings.HasPrefix(e.Type, "change.") {
		r.Hint(TopicChanges)
	}
	return nil
}

// publish sends a stored event to the streams: through the bus when the
// Recorder shares one (after the row committed, so a receiver that reads
// it finds it), else straight to this instance's.
func (r *Recorder) publish(ctx context.Context, row *models.Event) {
	if r.shared == nil {
		r.stream(row)
		return
	}
	payload, err := json.Marshal(row)
	if err != nil {
		r.log.Warn("events: unpublishable event", "type", row.Type, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	err = r.shared.Publish(ctx, busEvents, payload)
	if errors.Is(err, bus.ErrTooLarge) {
		err = r.shared.Publish(ctx, busEvents, fmt.Appendf(nil, `{"id":%d}`, row.ID))
	}
	if err != nil {
		r.log.Warn("events: an event did not reach the bus", "type", row.Type, "id", row.ID, "err", err)
	}
}

// stream puts an event in the streams of this instance that carry it.
func (r *Recorder) stream(row *models.Event) {
	payload, err := json.Marshal(row)
	if err != nil {
		r.log.Warn("events: unpublishable event", "type", row.Type, "err", err)
		return
	}
	// One message, shared by every queue it is put in. JSON has no raw
	// line breaks, so the payload is one data line.
	msg := make([]byte, 0, len(payload)+len(row.Type)+40)
	msg = append(msg, "id: "...)
	msg = strconv.AppendInt(msg, row.ID, 10)
	msg = append(msg, "\nevent: "...)
	msg = append(msg, row.Type...)
	msg = append(msg, "\ndata: "...)
	msg = append(msg, payload...)
	msg = append(msg, "\n\n"...)
	r.hub.publish(SiteStream, msg)
	if row.ProjectID != nil {
		r.hub.publish(ProjectStream(*row.ProjectID), msg)
	}
}

// ServeStream streams the named stream to w until the client leaves, falls
// behind (Config.Queue messages waiting: the stream ends with a Resync
// event), stops taking bytes for Config.WriteTimeout, or the Recorder
// closes; a silent stream carries a comment every Config.Heartbeat. The
// only error is ErrClosed, before anything is written. The caller decides
// who may follow which stream.
func (r *Recorder) ServeStream(w http.ResponseWriter, req *http.Request, stream string) error {
	r.followers.Add(1)
	defer r.followers.Add(-1)
	return r.hub.serve(w, req, stream, r.cfg)
}

// Followers counts the requests following the live bus on this instance
// (dashboards and scripts).
func (r *Recorder) Followers() int { return int(r.followers.Load()) }

// Close ends every stream and refuses new ones; a shared Recorder also
// leaves the bus.
func (r *Recorder) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		if r.timer != nil {
			r.timer.Stop()
		}
	}
	r.mu.Unlock()
	if r.sub != nil {
		r.sub.Close()
		<-r.relayed
	}
	r.hub.close()
}
