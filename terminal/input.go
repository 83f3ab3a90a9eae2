package terminal

import (
	"io"
	"sync"
)

// maxHeld bounds how many inputs may wait for an earlier sequence number;
// their bytes count against the queue too.
const maxHeld = 256

// writeChunk is the most the writer hands the PTY at once, so the queued
// length a client sees shrinks while a long paste is still going in.
const writeChunk = 16 << 10

// inputQueue puts a terminal's input in sequence order and feeds it to the
// PTY. Requests may overtake each other on the way to the server, so an
// input that arrives early waits in held until the gap before it fills; a
// sequence number seen before is dropped, which makes retrying a request
// safe. One writer goroutine drains the queue, and it alone blocks when the
// shell does not read.
//
// A keystroke into an idle queue does not wait for that goroutine to wake:
// add hands it to the PTY itself with one write that never blocks (try),
// and leaves to the writer whatever that write did not take.
type inputQueue struct {
	mu     sync.Mutex
	wake   sync.Cond // the writer waits here for input
	next   uint64    // the sequence number to apply next
	held   map[uint64][]byte
	ready  [][]byte // in order; the writer consumes ready[0] from its front
	queued int      // bytes in held and ready
	limit  int
	closed bool
	// writing: a write of ready[0] is under way, by the writer or by add;
	// there is never more than one, so the bytes keep their order.
	writing bool
	// try writes what it can of p without waiting and says how much; nil
	// leaves every write to the writer.
	try func(p []byte) int
}

func newInputQueue(limit int, try func(p []byte) int) *inputQueue {
	q := &inputQueue{next: 1, held: make(map[uint64][]byte), limit: limit, try: try}
	q.wake.L = &q.mu
	return q
}

// add queues data as input number seq and returns the queued length.
func (q *inputQueue) add(seq uint64, data []byte) (int, error) {
	if seq == 0 {
		return 0, ErrBadSeq
	}
	if len(data) > q.limit {
		return 0, ErrInputTooLarge
	}
	q.mu.Lock()
	queued, wrote, err := q.enqueue(seq, data)
	if wrote && q.try != nil && !q.writing && len(q.ready) > 0 {
		// The writer is idle: give the PTY the input now.
		q.writeFront(q.try)
		queued = q.queued
	}
	if len(q.ready) > 0 && !q.writing {
		q.wake.Signal()
	}
	q.mu.Unlock()
	return queued, err
}

// enqueue is add under the lock; wrote says data joined the ready queue.
func (q *inputQueue) enqueue(seq uint64, data []byte) (queued int, wrote bool, err error) {
	switch {
	case q.closed:
		return q.queued, false, ErrClosed
	case seq < q.next:
		return q.queued, false, nil // applied already: a retry
	case q.held[seq] != nil:
		return q.queued, false, nil // waiting already: a retry
	case q.queued+len(data) > q.limit:
		return q.queued, false, ErrInputFull
	case seq > q.next && len(q.held) >= maxHeld:
		return q.queued, false, ErrInputFull
	}
	// A non-nil slice marks a held entry, even an empty one.
	d := append(make([]byte, 0, len(data)), data...)
	q.queued += len(d)
	if seq > q.next {
		q.held[seq] = d
		return q.queued, false, nil
	}
	q.push(d)
	for {
		d, ok := q.held[q.next]
		if !ok {
			break
		}
		delete(q.held, q.next)
		q.push(d)
	}
	return q.queued, true, nil
}

// writeFront writes the front of the ready queue with write, which runs
// without the lock, and drops from the queue what it took. Called with the
// lock held and no write under way.
func (q *inputQueue) writeFront(write func([]byte) int) {
	chunk := q.ready[0][:min(len(q.ready[0]), writeChunk)]
	q.writing = true
	q.mu.Unlock()
	n := write(chunk)
	q.mu.Lock()
	q.writing = false
	if q.closed {
		return
	}
	q.queued -= n
	if q.ready[0] = q.ready[0][n:]; len(q.ready[0]) == 0 {
		q.ready[0] = nil
		q.ready = q.ready[1:]
	}
}

// push appends the input numbered q.next to the ready queue.
func (q *inputQueue) push(d []byte) {
	if len(d) > 0 {
		q.ready = append(q.ready, d)
	}
	q.next++
}

// length is the queued input length.
func (q *inputQueue) length() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued
}

// nextSeq is the sequence number the queue applies next.
func (q *inputQueue) nextSeq() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.next
}

// close stops the queue: later adds fail and the writer returns.
func (q *inputQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.ready, q.held, q.queued = nil, nil, 0
	q.mu.Unlock()
	q.wake.Broadcast()
}

// writeTo feeds queued input to w until the queue closes or a write fails.
// The front chunk leaves the queue only once written, so queued counts
// the bytes the shell has not been given yet.
func (q *inputQueue) writeTo(w io.Writer) {
	var err error
	write := func(p []byte) int {
		var n int
		n, err = w.Write(p)
		return n
	}
	q.mu.Lock()
	for {
		for (len(q.ready) == 0 || q.writing) && !q.closed {
			q.wake.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.writeFront(write)
		if err != nil {
			// The PTY is gone (the shell closed it, or Close did): input has
			// nowhere to go any more.
			q.mu.Unlock()
			q.close()
			return
		}
	}
}
