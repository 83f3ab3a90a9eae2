// Package events records what happens in Atelier: each event is a row of the
// events table, and it is also published on a live bus of UI hints that
// pages follow over Server-Sent Events. The bus is r3labs/sse with
// AutoReplay and AutoStream off: a hint that nobody was listening for is
// gone (the table keeps the record), and only streams we create exist.
package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/r3labs/sse/v2"

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

// Hint timing: hints of one topic that come within hintDelay are sent as
// one, so a burst of changes costs each dashboard one refresh; Heartbeat is
// how often an idle dashboard stream carries a comment, so proxies and
// browsers keep it open and a dead client is noticed on the next write.
const (
	hintDelay = 100 * time.Millisecond
	Heartbeat = 15 * time.Second
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

// Recorder stores events and publishes them.
type Recorder struct {
	db  *models.Store
	bus *sse.Server
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]bool // topics to hint at the next flush
	timer   *time.Timer     // the next flush; nil when none is due
	closed  bool
	stop    chan struct{} // ends the heartbeat
	beating sync.WaitGroup

	followers atomic.Int64 // requests in ServeStream
}

// New returns a Recorder; Close stops its bus.
func New(db *models.Store, log *slog.Logger) *Recorder { return newRecorder(db, log, Heartbeat) }

// newRecorder is New with the dashboard stream's heartbeat every beat.
func newRecorder(db *models.Store, log *slog.Logger, beat time.Duration) *Recorder {
	bus := sse.New()
	bus.AutoReplay = false
	bus.AutoStream = false
	// A proxy that buffers would hold hints back until its buffer fills.
	bus.Headers["X-Accel-Buffering"] = "no"
	bus.CreateStream(SiteStream)
	bus.CreateStream(DashboardStream)
	r := &Recorder{db: db, bus: bus, log: log, pending: map[string]bool{}, stop: make(chan struct{})}
	r.beating.Go(func() { r.heartbeat(beat) })
	return r
}

// heartbeat sends a comment on the dashboard stream every beat until
// Close.
func (r *Recorder) heartbeat(beat time.Duration) {
	tick := time.NewTicker(beat)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
			r.bus.TryPublish(DashboardStream, &sse.Event{Comment: []byte("ping")})
		}
	}
}

// Hint tells open dashboards that topic changed. It never blocks on them:
// hints are gathered for hintDelay and then published once.
func (r *Recorder) Hint(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.pending[topic] = true
	if r.timer == nil {
		r.timer = time.AfterFunc(hintDelay, r.flushHints)
	}
}

func (r *Recorder) flushHints() {
	r.mu.Lock()
	topics := r.pending
	r.pending = map[string]bool{}
	r.timer = nil
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return
	}
	for topic := range topics {
		r.bus.TryPublish(DashboardStream, &sse.Event{Event: []byte(topic), Data: []byte(topic)})
	}
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
	r.publish(row)
	r.Hint(TopicFeed)
	if e.Type == SessionOpened || e.Type == SessionClosed {
		r.Hint(TopicSessions)
	}
	if e.Type == SessionSubmitted || strings.HasPrefix(e.Type, "change.") {
		r.Hint(TopicChanges)
	}
	return nil
}

func (r *Recorder) publish(row *models.Event) {
	payload, err := json.Marshal(row)
	if err != nil {
		r.log.Warn("events: unpublishable event", "type", row.Type, "err", err)
		return
	}
	msg := &sse.Event{ID: []byte(strconv.FormatInt(row.ID, 10)), Event: []byte(row.Type), Data: payload}
	r.bus.TryPublish(SiteStream, msg)
	if row.ProjectID != nil {
		stream := ProjectStream(*row.ProjectID)
		if !r.bus.StreamExists(stream) {
			r.bus.CreateStream(stream)
		}
		r.bus.TryPublish(stream, msg)
	}
}

// ServeStream streams the named stream to w until the client leaves. The
// caller decides who may follow which stream.
func (r *Recorder) ServeStream(w http.ResponseWriter, req *http.Request, stream string) {
	if !r.bus.StreamExists(stream) {
		r.bus.CreateStream(stream)
	}
	q := req.URL.Query()
	q.Set("stream", stream)
	req.URL.RawQuery = q.Encode()
	r.followers.Add(1)
	defer r.followers.Add(-1)
	r.bus.ServeHTTP(w, req)
}

// Followers counts the requests following the live bus on this instance
// (dashboards and scripts).
func (r *Recorder) Followers() int { return int(r.followers.Load()) }

// Close stops the bus and ends every stream.
func (r *Recorder) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
		if r.timer != nil {
			r.timer.Stop()
		}
	}
	r.mu.Unlock()
	r.beating.Wait()
	r.bus.Close()
}
