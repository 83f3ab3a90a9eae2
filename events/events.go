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

// SiteStream carries every event, for the admin dashboard.
const SiteStream = "site"

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
}

// New returns a Recorder; Close stops its bus.
func New(db *models.Store, log *slog.Logger) *Recorder {
	bus := sse.New()
	bus.AutoReplay = false
	bus.AutoStream = false
	bus.CreateStream(SiteStream)
	return &Recorder{db: db, bus: bus, log: log}
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
	r.bus.ServeHTTP(w, req)
}

// Close stops the bus and ends every stream.
func (r *Recorder) Close() { r.bus.Close() }
