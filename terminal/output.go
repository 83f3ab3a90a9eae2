package terminal

import (
	"encoding/json"
	"sync"
)

// Output is a stream of bytes that viewers follow as Server-Sent Events
// (ServeStream): a ring of the newest bytes addressed by absolute offset,
// the viewers attached to it (at most Config.Viewers), each with its own
// offset, and, once it has ended, the exit event's data. A terminal's
// PTY output is one; a one-shot command's output is another
// (Manager.NewOutput), so both stream, resume and bound their viewers
// alike.
//
// A writer either waits for its viewers or never does. A shell's reader
// waits (writePaced): the viewer furthest ahead sets the shell's pace, as
// a real terminal would. Write never waits: a one-shot command writes to
// pipes on a clock of its own (its timeout), and its answer does not
// depend on anyone watching; a viewer that falls a ring behind is sent
// resync and follows again from a gap. Either way memory stays at the
// ring's size.
type Output struct {
	cfg Config

	mu      sync.Mutex
	drained sync.Cond // a paced writer waits here while a viewer lags
	ring    *ring
	viewers map[*viewer]struct{}
	paused  bool   // a paced writer waits on drained
	unpaced bool   // a paced writer waits no more (its terminal closes)
	ended   bool   // no byte comes any more; exit is the exit event's data
	rec     bool   // the terminal is being recorded: viewers say so
	exit    []byte // JSON
}

func newOutput(cfg Config) *Output {
	o := &Output{cfg: cfg, ring: newRing(cfg.RingBytes), viewers: make(map[*viewer]struct{})}
	o.drained.L = &o.mu
	return o
}

// NewOutput returns an Output under the Manager's limits (its ring, its
// viewers per output, its events and write deadline) for bytes that are
// no shell's: a one-shot command's. It counts in no shell slot; the
// caller bounds how many there are.
func (m *Manager) NewOutput() *Output { return newOutput(m.cfg) }

// Write appends p to the output without waiting for any viewer. It never
// fails; after End it drops p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.ring.write(p)
		o.wakeViewers()
	}
	return len(p), nil
}

// End says no byte follows: each viewer sends what it has not sent yet,
// then an exit event with exit as JSON, and its stream ends. Only the
// first End counts.
func (o *Output) End(exit any) {
	data, err := json.Marshal(exit)
	if err != nil {
		data = []byte("{}")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return
	}
	o.ended, o.exit = true, data
	o.wakeViewers()
}

// setRecording tells the viewers whether the terminal is being recorded.
func (o *Output) setRecording(on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rec = on
	o.wakeViewers()
}

// Offset is the absolute offset just after the newest byte: how many
// bytes were written in all.
func (o *Output) Offset() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ring.end
}

// Oldest is the offset of the oldest byte still in the ring.
func (o *Output) Oldest() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ring.start()
}

// Viewers is how many viewers follow the output now.
func (o *Output) Viewers() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.viewers)
}

// waitRoom is a paced writer's check before it reads more: while the
// viewer furthest ahead has more than HighWater bytes unsent, it waits
// until that viewer is at LowWater or below.
func (o *Output) waitRoom() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waitForViewers(0)
}

// writePaced appends p once the viewer furthest ahead has room for it,
// so that no byte that viewer has not sent is dropped.
func (o *Output) writePaced(p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waitForViewers(len(p))
	o.ring.write(p)
	o.wakeViewers()
}

// unpace releases a paced writer for good: its terminal is closing.
func (o *Output) unpace() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unpaced = true
	o.drained.Broadcast()
}

// waitForViewers holds a paced writer while the viewer furthest ahead
// lags. With n == 0 it is the high-water check before a read: a backlog
// above HighWater pauses reading until it is at most LowWater. With n > 0
// it makes room for n bytes just read, so that appending them cannot drop
// a byte that viewer has not sent. Either way the wait is one condition
// that each viewer's progress re-checks; there is nothing to reschedule,
// so reading resumes however long the pause was.
//
// Only the viewer furthest ahead sets the pace: one that falls further
// behind than the ring holds is dropped with a resync (ServeStream), and
// never holds the writer or the other viewers back. A lone viewer is the
// one furthest ahead, so it pauses a shell as a real terminal would, for
// no longer than its write deadline.
//
// o.mu must be held.
func (o *Output) waitForViewers(n int) {
	if n == 0 && o.backlog() <= o.cfg.HighWater {
		return
	}
	limit := o.cfg.LowWater
	if n > 0 {
		limit = o.ring.max - n
	}
	for !o.unpaced && o.backlog() > limit {
		o.paused = true
		o.drained.Wait()
	}
	o.paused = false
}

// backlog is the output the flow-controlled viewer furthest ahead has yet
// to read; 0 without one. The first bytes of a character it holds back
// (viewer.seen) do not count: it waits for the writer to finish the
// character, so the writer must not wait for them. (Room for n bytes
// then leaves those up to three bytes at risk only if the ring were
// within three bytes of n, and a ring is many reads long.) o.mu must be
// held.
func (o *Output) backlog() int {
	least := -1
	start := o.ring.start()
	for v := range o.viewers {
		if v.flow {
			b := int(o.ring.end - max(v.seen, start))
			if least < 0 || b < least {
				least = b
			}
		}
	}
	return max(least, 0)
}

// wakeViewers tells waiting viewers that something changed. Each has a
// channel of its own, made once, so waking costs no allocation however
// often the writer writes. o.mu must be held.
func (o *Output) wakeViewers() {
	for v := range o.viewers {
		if v.waiting {
			v.waiting = false
			select {
			case v.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}
}
