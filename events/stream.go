package events

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"atelier/fault"
)

// ErrClosed refuses a stream once the Recorder is closed: the server is
// shutting down, and the page's stream reconnects to the next one.
var ErrClosed = fault.New(fault.Unavailable, "shutting_down", "events: the live bus is closed", "The server is shutting down; the page reconnects by itself.")

// Resync is the event that ends the stream of a subscriber that fell
// behind. The subscriber missed messages it can never get: the page reads
// again what it shows and opens a new stream.
const Resync = "resync"

// Messages as they go on the wire. The data line is there because an
// EventSource drops an event without one.
var (
	resyncMessage = []byte("event: " + Resync + "\ndata: " + Resync + "\n\n")
	pingMessage   = []byte(": ping\n\n")
)

// batchBytes is how much of a subscriber's queue is gathered into one
// write: a burst costs one write and one flush rather than one each.
const batchBytes = 64 << 10

// Config holds the timings and bounds of the live bus; zero fields take
// the defaults.
type Config struct {
	// HintDelay gathers a topic's hints: those that come within it go out
	// as one; 100 ms.
	HintDelay time.Duration
	// Heartbeat is how long a stream may stay silent before it carries a
	// comment, so proxies and browsers keep it open and a dead client is
	// found by the next write; 15 s.
	Heartbeat time.Duration
	// Queue is how many messages may wait for one subscriber; one more
	// drops it; 256.
	Queue int
	// WriteTimeout bounds each write to a subscriber; one that takes longer
	// drops it; 5 s.
	WriteTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.HintDelay <= 0 {
		c.HintDelay = 100 * time.Millisecond
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.Queue <= 0 {
		c.Queue = 256
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 5 * time.Second
	}
	return c
}

// hub fans messages out to the subscribers of named streams. It replaces
// r3labs/sse, whose stream goroutine hands each message to every
// subscriber's channel in turn and blocks on the first full one: a reader
// that never reads froze the stream for everyone, and even new
// subscribers, who register through that same goroutine, got no headers.
// Its writes also had no deadline, so nothing ended such a reader.
//
// Here publishing never waits. Each subscriber has a queue of its own,
// which its request's goroutine drains; a message that finds the queue
// full drops the subscriber instead (its stream ends with Resync), and
// every write has a deadline, so a subscriber whose socket stops taking
// bytes ends too. Either way its request returns, and whatever it held
// (a stream place of its account) is given back.
type hub struct {
	queue int

	mu      sync.Mutex
	streams map[string]map[*subscriber]struct{} // only streams someone follows
	closed  bool
	done    chan struct{} // closed by close: every stream ends
}

// subscriber is one request following a stream.
type subscriber struct {
	queue  chan []byte
	behind chan struct{} // closed, under hub.mu, when it is dropped for a full queue
}

func newHub(queue int) *hub {
	return &hub{queue: queue, streams: map[string]map[*subscriber]struct{}{}, done: make(chan struct{})}
}

// subscribe adds a subscriber to stream, or returns ErrClosed.
func (h *hub) subscribe(stream string) (*subscriber, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	s := &subscriber{queue: make(chan []byte, h.queue), behind: make(chan struct{})}
	subs := h.streams[stream]
	if subs == nil {
		subs = map[*subscriber]struct{}{}
		h.streams[stream] = subs
	}
	subs[s] = struct{}{}
	return s, nil
}

// unsubscribe removes s; a stream nobody follows is forgotten, so the
// streams of every project ever followed do not pile up.
func (h *hub) unsubscribe(stream string, s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(stream, s)
}

func (h *hub) remove(stream string, s *subscriber) {
	subs := h.streams[stream]
	delete(subs, s)
	if len(subs) == 0 {
		delete(h.streams, stream)
	}
}

// publish queues msg for every subscriber of stream and drops those whose
// queue is full. It never blocks on a subscriber.
func (h *hub) publish(stream string, msg []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.streams[stream] {
		select {
		case s.queue <- msg:
		default:
			h.remove(stream, s)
			close(s.behind)
		}
	}
}

// resyncAll drops every subscriber as if its queue were full: each
// stream ends with Resync, and its page reads afresh.
func (h *hub) resyncAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for stream, subs := range h.streams {
		for s := range subs {
			h.remove(stream, s)
			close(s.behind)
		}
	}
}

// close ends every stream and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// serve writes stream to w until the client leaves, falls behind, stops
// taking bytes for cfg.WriteTimeout, or the hub closes. An error is
// returned only before anything is written.
func (h *hub) serve(w http.ResponseWriter, r *http.Request, stream string, cfg Config) error {
	s, err := h.subscribe(stream)
	if err != nil {
		return err
	}
	defer h.unsubscribe(stream, s)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	// A proxy that buffers would hold messages back until its buffer fills.
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: cfg.WriteTimeout}
	// The connection may serve other requests after the stream; they must
	// not inherit a deadline of ours.
	defer out.rc.SetWriteDeadline(time.Time{})
	if out.flush() != nil {
		return nil
	}
	idle := time.NewTimer(cfg.Heartbeat)
	defer idle.Stop()
	for {
		select {
		case <-s.behind:
			// What is still queued is superseded: the page reads afresh.
			out.buf = append(out.buf[:0], resyncMessage...)
			out.flush()
			return nil
		case msg := <-s.queue:
			out.buf = append(out.buf, msg...)
			for len(out.buf) < batchBytes && len(s.queue) > 0 {
				out.buf = append(out.buf, <-s.queue...)
			}
		case <-idle.C:
			out.buf = append(out.buf, pingMessage...)
		case <-r.Context().Done():
			return nil
		case <-h.done:
			return nil
		}
		if out.flush() != nil {
			return nil
		}
		idle.Reset(cfg.Heartbeat)
	}
}

// sseWriter writes gathered messages with a fresh deadline for each write.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
}

// flush writes what is gathered and pushes it to the client. A writer
// that cannot take deadlines (none of net/http's) still streams; the
// queue keeps it from holding anyone else back.
func (o *sseWriter) flush() error {
	err := o.rc.SetWriteDeadline(time.Now().Add(o.timeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if len(o.buf) > 0 {
		_, err := o.w.Write(o.buf)
		o.buf = o.buf[:0]
		if err != nil {
			return err
		}
	}
	return o.rc.Flush()
}
