package terminal

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"atelier/fault"
)

// Errors of recordings.
var (
	ErrRecording    = fault.New(fault.Conflict, "recording", "terminal: the terminal is being recorded already", "The terminal is being recorded already.")
	ErrNotRecording = fault.New(fault.Conflict, "not_recording", "terminal: the terminal is not being recorded", "The terminal is not being recorded.")
)

// MinRecordingBytes is the smallest bound a recording may have: its header
// and the note that it stopped at its bound must fit.
const MinRecordingBytes = 4 << 10

// FullNote is the marker event a recording ends with when it reached its
// bound.
const FullNote = "The recording stopped here: it reached its size limit."

// Recording is a recording of a terminal in the asciicast v2 format (the
// asciinema player's): a header line with the window's size, then one
// event line per read of output and per resize, each timed from the start.
// It is held in memory up to its bound, which the header and a closing
// note count in, and ends when the terminal's owner stops it, when the
// terminal ends, or at the bound.
type Recording struct {
	done chan struct{} // closed when no event follows

	mu      sync.Mutex
	cast    []byte
	max     int
	start   time.Time
	at      time.Duration // the time of the last event
	partial []byte        // the first bytes of a character the last read cut in two
	full    bool          // it stopped at its bound
	ended   bool
}

func newRecording(limit, cols, rows int, title string, start time.Time) *Recording {
	r := &Recording{done: make(chan struct{}), max: max(limit, MinRecordingBytes), start: start}
	header, _ := json.Marshal(struct {
		Version   int               `json:"version"`
		Width     int               `json:"width"`
		Height    int               `json:"height"`
		Timestamp int64             `json:"timestamp"`
		Title     string            `json:"title,omitempty"`
		Env       map[string]string `json:"env"`
	}{2, cols, rows, start.Unix(), title, map[string]string{"TERM": "xterm-256color"}})
	r.cast = append(header, '\n')
	return r
}

// Done is closed once the recording has ended; Cast is final then.
func (r *Recording) Done() <-chan struct{} { return r.done }

// Cast is the recording so far: the asciicast file's bytes.
func (r *Recording) Cast() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cast[:len(r.cast):len(r.cast)]
}

// Truncated reports whether the recording stopped at its bound.
func (r *Recording) Truncated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full
}

// output records p, as the shell wrote it, at now. A character cut in two
// by the read waits for its other half, since each event's text is a JSON
// string. It reports whether the recording goes on.
func (r *Recording) output(p []byte, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return false
	}
	text := append(r.partial, p...)
	cut := len(text)
	// Back up over an incomplete character at the end: at most three bytes.
	for i := len(text) - 1; i >= 0 && i >= len(text)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(text[i]) {
			if !utf8.FullRune(text[i:]) {
				cut = i
			}
			break
		}
	}
	r.partial = append([]byte(nil), text[cut:]...)
	if cut == 0 {
		return true
	}
	return r.event(now, "o", string(text[:cut]))
}

// resize records a new window size at now.
func (r *Recording) resize(cols, rows int, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return false
	}
	return r.event(now, "r", strconv.Itoa(cols)+"x"+strconv.Itoa(rows))
}

// event appends one event line, unless it and the closing note would pass
// the bound: then the note ends the recording. r.mu must be held.
func (r *Recording) event(now time.Time, code, data string) bool {
	// now was read before r.mu was taken: an event that took the lock
	// first may be later, and a cast's times never go back.
	r.at = max(r.at, now.Sub(r.start))
	line := eventLine(r.at, code, data)
	note := eventLine(r.at, "m", FullNote)
	if len(r.cast)+len(line)+len(note) > r.max {
		r.cast = append(r.cast, note...)
		r.full = true
		r.end()
		return false
	}
	r.cast = append(r.cast, line...)
	return true
}

// stop ends the recording; what a cut character had begun is dropped.
func (r *Recording) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end()
}

// end closes the recording once. r.mu must be held.
func (r *Recording) end() {
	if !r.ended {
		r.ended = true
		close(r.done)
	}
}

// eventLine is one asciicast event: [seconds, code, data] and a newline.
func eventLine(at time.Duration, code, data string) []byte {
	text, _ := json.Marshal(data) // invalid UTF-8 becomes U+FFFD
	b := []byte{'['}
	b = strconv.AppendFloat(b, max(at, 0).Seconds(), 'f', 6, 64)
	b = append(b, ", \""...)
	b = append(b, code...)
	b = append(b, "\", "...)
	b = append(b, text...)
	return append(b, "]\n"...)
}

// Record starts recording the terminal, from its next output on, up to
// limit bytes (at least MinRecordingBytes). Every viewer's stream says so
// (a rec event). ErrRecording: a recording is under way; ErrClosed: the
// terminal has ended.
func (t *Terminal) Record(limit int, title string) (*Recording, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return nil, ErrClosed
	}
	if r := t.rec.Load(); r != nil {
		select {
		case <-r.Done():
		default:
			return nil, ErrRecording
		}
	}
	r := newRecording(limit, t.cols, t.rows, title, time.Now())
	t.rec.Store(r)
	t.out.setRecording(true)
	return r, nil
}

// StopRecording ends the recording under way and returns it.
// ErrNotRecording: there is none.
func (t *Terminal) StopRecording() (*Recording, error) {
	r := t.rec.Swap(nil)
	if r == nil {
		return nil, ErrNotRecording
	}
	r.stop()
	t.out.setRecording(false)
	return r, nil
}

// recorded hands what the shell wrote, or a new size, to r, the recording
// that was under way when it happened (nil: none), and lets go of a
// recording that reached its bound.
func (t *Terminal) recorded(r *Recording, record func(r *Recording, now time.Time) bool) {
	if r == nil || record(r, time.Now()) {
		return
	}
	if t.rec.CompareAndSwap(r, nil) {
		t.out.setRecording(false)
	}
}
