package sandbox

import (
	"io"
	"sync"
)

// readChunk is how much one read of a command's pipe takes.
const readChunk = 32 << 10

// capture collects a command's stdout and stderr within the limits, in
// memory bounded by them: Tail keeps a ring per stream, otherwise the first
// bytes are kept and the rest is counted and dropped. Every byte read also
// goes to live (Spec.Output), when there is one.
type capture struct {
	lim      Limits
	live     io.Writer
	mu       sync.Mutex
	out, err stream
	kept     int64 // bytes kept in both streams (head mode)
	over     chan struct{}
	overDone bool
}

type stream struct {
	head  []byte // head mode
	tail  ring   // Tail mode
	total int64  // bytes the command wrote
	cut   bool   // head mode: some bytes were dropped
}

func newCapture(lim Limits, live io.Writer) *capture {
	c := &capture{lim: lim, live: live, over: make(chan struct{})}
	if lim.Tail {
		n := lim.MaxStream
		if lim.MaxCombined > 0 && lim.MaxCombined < n {
			n = lim.MaxCombined
		}
		c.out.tail.max, c.err.tail.max = int(n), int(n)
	}
	return c
}

// overflowed is closed when a stream passes a limit in head mode.
func (c *capture) overflowed() <-chan struct{} { return c.over }

// drain reads r to its end (or an error) into s.
func (c *capture) drain(r io.Reader, s *stream) {
	buf := make([]byte, readChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.write(s, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (c *capture) write(s *stream, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live != nil {
		c.live.Write(p)
	}
	s.total += int64(len(p))
	if c.lim.Tail {
		s.tail.write(p)
		return
	}
	room := c.lim.MaxStream - int64(len(s.head))
	if c.lim.MaxCombined > 0 {
		room = min(room, c.lim.MaxCombined-c.kept)
	}
	take := min(max(room, 0), int64(len(p)))
	s.head = append(s.head, p[:take]...)
	c.kept += take
	if take < int64(len(p)) {
		s.cut = true
		if !c.overDone {
			c.overDone = true
			close(c.over)
		}
	}
}

// didOverflow reports whether a limit was passed in head mode.
func (c *capture) didOverflow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overDone
}

// fill puts the captured output into r. In Tail mode a combined limit is
// shared out at the end: a stream under half of it keeps all it has and
// the other gets the rest.
func (c *capture) fill(r *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lim.Tail {
		r.Stdout, r.StdoutTruncated = clone(c.out.head), c.out.cut
		r.Stderr, r.StderrTruncated = clone(c.err.head), c.err.cut
		return
	}
	out, errb := c.out.tail.bytes(), c.err.tail.bytes()
	if lim := int(c.lim.MaxCombined); lim > 0 && len(out)+len(errb) > lim {
		switch half := lim / 2; {
		case len(out) <= half:
			errb = errb[len(errb)-(lim-len(out)):]
		case len(errb) <= half:
			out = out[len(out)-(lim-len(errb)):]
		default:
			out = out[len(out)-half:]
			errb = errb[len(errb)-(lim-half):]
		}
	}
	r.Stdout, r.StdoutTruncated = cleanTail(out, c.out.total)
	r.Stderr, r.StderrTruncated = cleanTail(errb, c.err.total)
}

// cleanTail marks a tail truncated when it holds less than was written, and
// then drops up to three UTF-8 continuation bytes from its start, the rest
// of a character whose first byte was cut away.
func cleanTail(b []byte, total int64) ([]byte, bool) {
	if int64(len(b)) >= total {
		return b, false
	}
	for i := 0; i < 3 && len(b) > 0 && b[0]&0xC0 == 0x80; i++ {
		b = b[1:]
	}
	return b, true
}

func clone(b []byte) []byte {
	return append([]byte{}, b...)
}

// ring keeps the last max bytes written to it. It grows as output comes,
// so a short output costs little, and never past max.
type ring struct {
	buf   []byte
	max   int
	start int  // when full: where the oldest byte is
	full  bool // len(buf) == max and writes wrap around
}

func (r *ring) write(p []byte) {
	if r.max <= 0 || len(p) == 0 {
		return
	}
	if len(p) >= r.max {
		if cap(r.buf) < r.max {
			r.buf = make([]byte, r.max)
		}
		r.buf = r.buf[:r.max]
		copy(r.buf, p[len(p)-r.max:])
		r.start, r.full = 0, true
		return
	}
	if !r.full {
		n := min(r.max-len(r.buf), len(p))
		r.grow(len(r.buf) + n)
		r.buf = append(r.buf, p[:n]...)
		p = p[n:]
		if len(r.buf) < r.max {
			return
		}
		r.start, r.full = 0, true
	}
	for len(p) > 0 {
		n := copy(r.buf[r.start:], p)
		p = p[n:]
		r.start = (r.start + n) % r.max
	}
}

// grow makes room for n bytes, doubling but never past max.
func (r *ring) grow(n int) {
	if n <= cap(r.buf) {
		return
	}
	c := min(max(n, 2*cap(r.buf), 4096), r.max)
	b := make([]byte, len(r.buf), c)
	copy(b, r.buf)
	r.buf = b
}

// bytes returns a copy of what the ring holds, oldest first.
func (r *ring) bytes() []byte {
	out := make([]byte, 0, len(r.buf))
	if !r.full {
		return append(out, r.buf...)
	}
	out = append(out, r.buf[r.start:]...)
	return append(out, r.buf[:r.start]...)
}
