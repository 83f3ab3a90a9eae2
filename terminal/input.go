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
type inputQueue struct {
	mu     sync.Mutex
	wake   sync.Cond // the writer waits here for input
	next   uint64    // the sequence number to apply next
	held   map[uint64][]byte
	ready  [][]byte // in order; the writer consumes ready[0] from its front
	queued int      // bytes in held and ready
	limit  int
	closed bool
}

func newInputQueue(limit int) *inputQueue {
	q := &inputQueue{next: 1, held: make(map[uint64][]byte), limit: limit}
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
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return q.queued, ErrClosed
	case seq < q.next:
		return q.queued, nil // applied already: a retry
	case q.held[seq] != nil:
		return q.queued, nil // waiting already: a retry
	case q.queued+len(data) > q.limit:
		return q.queued, ErrInputFull
	case seq > q.next && len(q.held) >= maxHeld:
		return q.queued, ErrInputFull
	}
	// A non-nil slice marks a held entry, even an empty one.
	d := append(make([]byte, 0, len(data)), data...)
	q.queued += len(d)
	if seq > q.next {
		q.held[seq] = d
		return q.queued, nil
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
	q.wake.Signal()
	return q.queued, nil
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
	for {
		q.mu.Lock()
		for len(q.ready) == 0 && !q.closed {
			q.wake.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		chunk := q.ready[0][:min(len(q.ready[0]), writeChunk)]
		q.mu.Unlock()

		n, err := w.Write(chunk)

		q.mu.Lock()
		if !q.closed {
			q.queued -= n
			if q.ready[0] = q.ready[0][n:]; len(q.ready[0]) == 0 {
				q.ready[0] = nil
				q.ready = q.ready[1:]
			}
		}
		q.mu.Unlock()
		if err != nil {
			// The PTY is gone (the shell closed it, or Close did): input has
			// nowhere to go any more.
			q.close()
			return
		}
	}
}
