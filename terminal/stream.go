package terminal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// viewer is one attached output stream.
type viewer struct {
	off  uint64 // the next offset to send; it moves once bytes are in an event
	seen uint64 // the offset after the bytes read: past off by a cut character's first bytes
	rec  bool   // the last rec event it sent said on
	flow bool   // its writes have a deadline, so it may hold the reader back
	// waiting says the viewer has sent everything and waits on wake, which
	// has room for one wake-up (Output.wakeViewers). Both under o.mu.
	waiting bool
	wake    chan struct{}
}

// ServeStream sends the terminal's output as Server-Sent Events; see
// Output.ServeStream. The viewer furthest ahead sets the shell's pace
// (see waitForViewers), so a lone viewer that keeps reading never loses a
// byte.
func (t *Terminal) ServeStream(w http.ResponseWriter, r *http.Request) error {
	return t.out.ServeStream(w, r)
}

// ServeStream sends the output as Server-Sent Events. It starts at the
// Last-Event-ID header, else the from query parameter, else the oldest
// byte still in the ring, and sends:
//
//	event: text    id: offset after the bytes   data: the bytes, valid UTF-8, as one JSON string
//	event: out     id: offset after the bytes   data: base64 of the raw bytes
//	event: gap     id: offset it resumes at      data: how many bytes were lost
//	event: resync  id: offset it had reached     data: resync
//	event: exit    id: final offset              data: End's JSON, e.g. {"code":3,"signal":""}
//	event: beat    id: offset reached            data: Config.Heartbeat in milliseconds
//	event: rec     id: offset reached            data: on, or off
//
// text and out carry the output, in order, each byte once: a run of
// valid UTF-8 as text (unless its JSON is longer than its base64, as for
// output mostly of escape sequences, or it is a short run among bytes
// that are not UTF-8, as in binary output), the rest as out; see
// appendOutput. No event splits a character: the first bytes of one that
// the shell has not finished writing wait for the rest (or for the end
// of the output, and then go as out). Either way the id is the offset
// after the event's bytes, so a page resumes at the id of whichever event
// it saw last.
//
// rec comes when the terminal starts being recorded (at once for a viewer
// that attaches while it is) and when the recording ends, so that every
// page that shows the terminal can say so.
//
// beat comes when the stream has been idle for Config.Heartbeat: a page
// that hears nothing for two of them knows its connection is dead, even
// one that stays open and moves no bytes. A gap comes
// first when the wanted bytes have already left the ring. A viewer that
// falls so far behind the writer (or, for a paced writer, the other
// viewers) that bytes it still needs leave the ring gets resync and its
// stream ends: the page reconnects from that offset (and is told the
// gap). exit follows the last output byte, and then the stream ends.
//
// The error is for a request refused before anything is written
// (ErrBadOffset; ErrViewers past Config.Viewers); once streaming,
// ServeStream returns nil when the client goes away, falls behind, its
// write stalls past Config.WriteTimeout, or exit is sent. Each write gets
// its own deadline through http.ResponseController, so the server needs no
// write timeout, which would cut every stream. A writer without deadlines
// (ErrNotSupported) still streams, but never holds a paced writer back.
func (o *Output) ServeStream(w http.ResponseWriter, r *http.Request) error {
	from, given, err := resumeOffset(r)
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	v := &viewer{flow: rc.SetWriteDeadline(time.Now().Add(o.cfg.WriteTimeout)) == nil, wake: make(chan struct{}, 1)}
	if v.flow {
		defer rc.SetWriteDeadline(time.Time{})
	}

	o.mu.Lock()
	if !given {
		from = o.ring.start()
	}
	if from > o.ring.end {
		o.mu.Unlock()
		return ErrBadOffset
	}
	// Each viewer holds a connection and a descriptor; a bound per
	// output keeps one page opened in many tabs (or a script) from
	// exhausting the server's.
	if len(o.viewers) >= o.cfg.Viewers {
		o.mu.Unlock()
		return ErrViewers
	}
	v.off, v.seen = from, from
	o.viewers[v] = struct{}{}
	o.mu.Unlock()
	defer o.detach(v)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &eventWriter{w: w, rc: rc, deadline: v.flow, timeout: o.cfg.WriteTimeout}
	if s.flush() != nil {
		return nil
	}

	ping := time.NewTicker(o.cfg.Heartbeat)
	defer ping.Stop()
	raw := make([]byte, o.cfg.EventBytes)
	// A resume from bytes that already left the ring is told how many.
	o.mu.Lock()
	if start := o.ring.start(); v.off < start {
		lost := start - v.off
		v.off, v.seen = start, start
		o.mu.Unlock()
		if s.event("gap", start, strconv.AppendUint(raw[:0], lost, 10)) != nil {
			return nil
		}
	} else {
		o.mu.Unlock()
	}
	for {
		o.mu.Lock()
		if v.rec != o.rec {
			v.rec = o.rec
			o.mu.Unlock()
			if s.event("rec", v.off, recState(v.rec)) != nil {
				return nil
			}
			continue
		}
		switch start := o.ring.start(); {
		case v.off < start:
			// Bytes this viewer still needed were overwritten while it was
			// attached: the writer (or the others) went on without it.
			off := v.off
			o.mu.Unlock()
			s.event("resync", off, []byte("resync"))
			return nil
		case v.off < o.ring.end && (v.seen < o.ring.end || o.ended):
			// Everything written since the last event, up to EventBytes,
			// becomes the next events (one, unless its bytes change
			// between text and out). Events are gathered until the
			// viewer has caught up or flushBytes are waiting, then
			// written and flushed together: a busy writer costs one
			// write and one flush per batch rather than per read. A
			// character cut at the end of what was read waits for the
			// next read, unless nothing more can come.
			n := o.ring.read(v.off, raw)
			final := o.ended && v.off+uint64(n) == o.ring.end
			o.mu.Unlock()
			sent := s.output(v.off, raw[:n], !final)
			o.mu.Lock()
			v.off, v.seen = v.off+uint64(sent), v.off+uint64(n)
			more := v.seen < o.ring.end
			if o.paused {
				o.drained.Signal()
			}
			o.mu.Unlock()
			if (!more || len(s.buf) >= flushBytes) && s.flush() != nil {
				return nil
			}
			continue
		case o.ended:
			data := o.exit
			o.mu.Unlock()
			s.event("exit", v.off, data)
			return nil
		}
		v.waiting = true
		o.mu.Unlock()

		select {
		case <-v.wake:
		case <-ping.C:
			if s.event("beat", v.off, strconv.AppendInt(raw[:0], o.cfg.Heartbeat.Milliseconds(), 10)) != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
	}
}

func recState(on bool) []byte {
	if on {
		return []byte("on")
	}
	return []byte("off")
}

// flushBytes is how much of a viewer's events are gathered before they
// are written: a batch large enough that writes and flushes are few, small
// enough to keep each viewer's buffer modest.
const flushBytes = 64 << 10

// detach removes v; a paced writer may have been waiting for it.
func (o *Output) detach(v *viewer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.viewers, v)
	if o.paused {
		o.drained.Signal()
	}
}

// resumeOffset reads where a stream starts; given is false when the
// request does not say.
func resumeOffset(r *http.Request) (off uint64, given bool, err error) {
	s := r.Header.Get("Last-Event-ID")
	if s == "" {
		s = r.URL.Query().Get("from")
	}
	if s == "" {
		return 0, false, nil
	}
	off, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, ErrBadOffset
	}
	return off, true, nil
}

// eventWriter gathers SSE events in one buffer it keeps and writes them in
// one write and one flush: the stream loop says when for output events,
// every other event goes at once. Each write has a fresh deadline.
type eventWriter struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	deadline bool
	timeout  time.Duration
	buf      []byte // events not written yet
}

// output adds the text and out events for raw, whose first byte is at
// offset off, and returns how many of its bytes they carry; with hold, a
// character cut at raw's end is left for the next call.
func (s *eventWriter) output(off uint64, raw []byte, hold bool) int {
	var n int
	s.buf, n = appendOutput(s.buf, off, raw, hold)
	return n
}

// event adds a named event and sends it with what is gathered.
func (s *eventWriter) event(name string, id uint64, data []byte) error {
	b := append(appendHead(s.buf, name, id), data...)
	s.buf = append(b, "\n\n"...)
	return s.flush()
}

// flush writes the gathered events and pushes them to the client.
func (s *eventWriter) flush() error {
	if s.deadline {
		if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil {
			return err
		}
	}
	if len(s.buf) > 0 {
		_, err := s.w.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

// inputResult is ServeInput's answer.
type inputResult struct {
	Queued int    `json:"queued"` // input bytes the shell has not been given yet
	Next   uint64 `json:"next"`   // the sequence number the terminal applies next
}

// ServeInput queues the raw request body as input, numbered by the
// X-Input-Seq header (see Input), and answers {"queued":N,"next":S} as
// JSON. A missing or malformed number is ErrBadSeq, a body larger than the
// input queue ErrInputTooLarge, and a full queue ErrInputFull: the client
// waits and sends the same number again. Errors come back before anything
// is written.
func (t *Terminal) ServeInput(w http.ResponseWriter, r *http.Request) error {
	seq, err := strconv.ParseUint(r.Header.Get("X-Input-Seq"), 10, 64)
	if err != nil || seq == 0 {
		return ErrBadSeq
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(t.cfg.InputBytes)))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return ErrInputTooLarge
		}
		return fmt.Errorf("terminal: read input: %w", err)
	}
	queued, err := t.Input(seq, body)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	return json.NewEncoder(w).Encode(inputResult{Queued: queued, Next: t.NextSeq()})
}
