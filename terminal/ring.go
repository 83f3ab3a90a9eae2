package terminal

// ring keeps the newest bytes of a terminal's output, at most max of them,
// addressed by absolute offset: the first byte the shell ever wrote is
// offset 0, and an offset keeps naming the same byte for the terminal's
// whole life. That is what lets a viewer resume from the id of the last
// event it saw, and what lets the stream say exactly how much it lost.
//
// The buffer grows by doubling up to max, so an idle terminal holds a few
// KiB rather than the whole ring. The byte at offset o lives at
// buf[o % len(buf)]; growing re-places the kept bytes for the new length.
//
// A ring is not safe for concurrent use; the terminal's mutex guards it.
type ring struct {
	buf  []byte
	max  int
	size int    // bytes kept, ≤ len(buf)
	end  uint64 // offset just after the newest byte
}

// minRingAlloc is the first allocation: a prompt and a few lines.
const minRingAlloc = 4 << 10

func newRing(max int) *ring { return &ring{max: max} }

// start is the offset of the oldest byte still kept.
func (r *ring) start() uint64 { return r.end - uint64(r.size) }

// write appends p, dropping the oldest bytes once the ring is full.
func (r *ring) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) >= r.max {
		// Only the tail of p survives, and it fills the ring.
		r.grow(r.max)
		r.end += uint64(len(p) - r.max)
		p = p[len(p)-r.max:]
		r.size = 0
	}
	if need := r.size + len(p); need > len(r.buf) && len(r.buf) < r.max {
		n := max(len(r.buf), minRingAlloc)
		for n < need {
			n *= 2
		}
		r.grow(min(n, r.max))
	}
	at := int(r.end % uint64(len(r.buf)))
	k := copy(r.buf[at:], p)
	copy(r.buf, p[k:])
	r.end += uint64(len(p))
	r.size = min(r.size+len(p), len(r.buf))
}

// grow gives the ring a buffer of n bytes, keeping what it holds.
func (r *ring) grow(n int) {
	if n <= len(r.buf) {
		return
	}
	nb := make([]byte, n)
	from := r.start()
	at := int(from % uint64(n))
	k := min(r.size, n-at)
	r.copyOut(from, nb[at:at+k])
	r.copyOut(from+uint64(k), nb[:r.size-k])
	r.buf = nb
}

// read copies bytes from offset off into dst and returns how many; off must
// lie between start and end.
func (r *ring) read(off uint64, dst []byte) int {
	if off < r.start() || off > r.end {
		panic("terminal: ring read outside the kept bytes")
	}
	n := int(min(uint64(len(dst)), r.end-off))
	r.copyOut(off, dst[:n])
	return n
}

// copyOut fills dst with the kept bytes from offset off.
func (r *ring) copyOut(off uint64, dst []byte) {
	if len(dst) == 0 {
		return
	}
	at := int(off % uint64(len(r.buf)))
	k := copy(dst, r.buf[at:])
	copy(dst[k:], r.buf)
}
