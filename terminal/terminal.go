// Package terminal runs interactive shells for the browser: output
// goes to viewers as a Server-Sent Events stream that resumes at an exact
// byte offset, and input comes back as numbered chunks applied in order.
//
// A Manager bounds how many shells run (per account and per instance) and
// finds them again by id. Each Terminal owns one Stream (a sandbox
// provider's console, or a PTY master of this host), a ring of its recent output, and three goroutines:
// a reader that moves the stream's output into the ring, a writer that
// feeds queued input to the stream, and a waiter that collects the shell's
// exit. How and where the shell process is started (as which user, in
// which sandbox, on which machine) is the caller's business: it passes a
// Launcher.
package terminal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"atelier/fault"
)

// Errors of the package; each names what the client did or may do next.
var (
	ErrAccountShells  = fault.New(fault.Limit, "account_shells", "terminal: you have as many shells open as an account may; close one first", "You have as many shells open as an account may; close one first.")
	ErrInstanceShells = fault.New(fault.Limit, "instance_shells", "terminal: the server runs as many shells as it allows; try again later", "The server runs as many shells as it allows; try again later.")
	ErrViewers        = fault.New(fault.Limit, "too_many_streams", "terminal: the terminal has as many viewers as it allows; close a tab that shows it", "The terminal has as many viewers as it allows; close a tab that shows it.")
	ErrInputFull      = fault.New(fault.Limit, "input_full", "terminal: too much input is waiting for the shell; try again in a moment", "Too much input is waiting for the shell; try again in a moment.")
	ErrInputTooLarge  = fault.New(fault.TooLarge, "too_large", "terminal: that input is larger than the whole input queue", "That input is larger than the whole input queue.")
	ErrBadSeq         = fault.New(fault.BadInput, "bad_seq", "terminal: an input sequence number is a whole number from 1", "An input sequence number is a whole number from 1.")
	ErrBadSize        = fault.New(fault.BadInput, "bad_size", "terminal: columns and rows are whole numbers from 1 to 1000", "Columns and rows are whole numbers from 1 to 1000.")
	ErrBadOffset      = fault.New(fault.BadInput, "bad_offset", "terminal: that resume offset is not a byte offset of this terminal's output", "That resume offset is not a byte offset of this terminal's output.")
	// ErrNotFound is a terminal that does not exist or is someone else's:
	// the two look the same from outside.
	ErrNotFound = fault.New(fault.NotFound, "not_found", "terminal: no such terminal", "There is no such terminal.")
	ErrClosed   = fault.New(fault.Gone, "terminal_ended", "terminal: the terminal has ended", "The terminal has ended.")
	ErrSlotUsed = errors.New("terminal: that shell reservation was used or released already")
)

// MaxSize is the most columns or rows a terminal may have.
const MaxSize = 1000

// Launcher starts a shell with a window of cols×rows, and returns the
// stream of its terminal and the process to wait for. On failure nothing of
// it is left running.
type Launcher interface {
	Launch(cols, rows int, opts Options) (Stream, Process, error)
}

// Stream is a shell's terminal as a Terminal drives it, wherever the shell
// runs: output to read, input to write, a window to size. Nothing in it is
// a file of this host, so a shell on another machine can have one.
type Stream interface {
	// Read returns the shell's output; it fails once no writer is left,
	// at the read deadline, or once the stream is closed.
	Read(p []byte) (int, error)
	SetReadDeadline(t time.Time) error
	// Write gives the shell input, waiting for room.
	Write(p []byte) (int, error)
	// TryWrite gives the shell what it takes of p now, without waiting:
	// 0 when it is full or gone.
	TryWrite(p []byte) int
	// Resize sets the window size; an error wrapping os.ErrClosed once
	// the stream is closed.
	Resize(cols, rows int) error
	Close() error
}

// Process is a started shell.
type Process interface {
	// Pid is the shell's process id, which the default kill uses as its
	// session and process group; 0 when there is no such process.
	Pid() int
	// Wait blocks until the shell ends and reports how.
	Wait() (Exit, error)
}

// Exit is how a shell ended.
type Exit struct {
	Code   int    `json:"code"`   // the exit code; -1 when a signal ended the shell
	Signal string `json:"signal"` // e.g. "SIGKILL"; empty for a normal exit
}

// Options describe one terminal.
type Options struct {
	Cols, Rows int // window size before the shell starts; 80×24 when zero

	// Kill ends every process of the shell. Close calls it, and so does the
	// end of the shell, to take down what the shell left behind; it may run
	// twice, even at once. By default the session and process group of
	// Process.Pid get SIGKILL, so a Process without a pid needs a Kill.
	Kill func() error

	// Tag is the opener's record of whose terminal this is (an edit
	// session's shell keeps its session, owner and reservation here), so
	// the Manager stays the one registry of terminals and callers look
	// terminals up through it.
	Tag any
}

// Terminal is one shell on a Stream.
type Terminal struct {
	id      string
	account string
	tag     any
	opened  time.Time
	cfg     Config
	stream  Stream
	proc    Process
	kill    func() error
	in      *inputQueue
	mgr     *Manager
	slot    *Slot

	out *Output                   // the PTY's output, paced by its viewers
	rec atomic.Pointer[Recording] // the recording under way, if any

	mu      sync.Mutex
	closing bool // Close was called
	exited  bool // the shell has ended; exit holds how
	exit    Exit
	ended   bool // the reader and the waiter are done: no more output
	cols    int
	rows    int

	readerDone chan struct{}
	writerDone chan struct{}
	done       chan struct{}
	closeMu    sync.Mutex
	killed     bool // Close's kill succeeded
}

// open launches the shell; run starts the terminal's goroutines.
func open(id, account string, cfg Config, launch Launcher, opts Options) (*Terminal, error) {
	cols, rows := opts.Cols, opts.Rows
	if cols == 0 && rows == 0 {
		cols, rows = 80, 24
	}
	if !validSize(cols, rows) {
		return nil, ErrBadSize
	}
	stream, p, err := launch.Launch(cols, rows, opts)
	if err != nil {
		return nil, err
	}
	t := &Terminal{
		id:         id,
		account:    account,
		tag:        opts.Tag,
		opened:     time.Now(),
		cfg:        cfg,
		stream:     stream,
		proc:       p,
		kill:       opts.Kill,
		in:         newInputQueue(cfg.InputBytes, stream.TryWrite),
		out:        newOutput(cfg),
		cols:       cols,
		rows:       rows,
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
	if t.kill == nil {
		pid := p.Pid()
		t.kill = func() error { return killSession(pid) }
	}
	return t, nil
}

// run starts the terminal's goroutines.
func (t *Terminal) run() {
	go t.read()
	go func() {
		defer close(t.writerDone)
		t.in.writeTo(t.stream)
	}()
	go t.wait()
}

func validSize(cols, rows int) bool {
	return cols >= 1 && cols <= MaxSize && rows >= 1 && rows <= MaxSize
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails
	return "term_" + hex.EncodeToString(b)
}

// ID names the terminal.
func (t *Terminal) ID() string { return t.id }

// Account is the account the terminal was opened for.
func (t *Terminal) Account() string { return t.account }

// Tag is Options.Tag as the terminal was opened with.
func (t *Terminal) Tag() any { return t.tag }

// Opened is when the shell started.
func (t *Terminal) Opened() time.Time { return t.opened }

// Pid is the shell's process id as its Process reports it.
func (t *Terminal) Pid() int { return t.proc.Pid() }

// Done is closed when the terminal has ended: the shell exited, its output
// is all in the ring, and its PTY is closed.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// running reports whether the terminal has not ended yet.
func (t *Terminal) running() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// ExitStatus reports how the shell ended; ok is false while it runs.
func (t *Terminal) ExitStatus() (e Exit, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exit, t.exited
}

// Size is the window size.
func (t *Terminal) Size() (cols, rows int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cols, t.rows
}

// Offset is the absolute offset just after the newest output byte: how
// many bytes the shell has written in all.
func (t *Terminal) Offset() uint64 { return t.out.Offset() }

// Viewers is how many viewers follow the output now.
func (t *Terminal) Viewers() int { return t.out.Viewers() }

// Oldest is the offset of the oldest output byte still in the ring.
func (t *Terminal) Oldest() uint64 { return t.out.Oldest() }

// Input queues data as input number seq and returns the queued input
// length: bytes accepted but not yet written to the PTY. Numbers start at 1
// (NextSeq says which comes next) and each terminal applies them in order:
// an input that arrives before its predecessors waits for them, and a number
// seen before is ignored, so a client may safely retry. A queue that cannot
// take data returns ErrInputFull; data larger than the whole queue
// ErrInputTooLarge.
func (t *Terminal) Input(seq uint64, data []byte) (queued int, err error) {
	return t.in.add(seq, data)
}

// QueuedInput is the input length waiting for the PTY.
func (t *Terminal) QueuedInput() int { return t.in.length() }

// NextSeq is the input sequence number the terminal applies next; a page
// that attaches to a running terminal continues from it.
func (t *Terminal) NextSeq() uint64 { return t.in.nextSeq() }

// Resize sets the window size; the shell's foreground job gets SIGWINCH.
func (t *Terminal) Resize(cols, rows int) error {
	if !validSize(cols, rows) {
		return ErrBadSize
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return ErrClosed
	}
	if err := t.stream.Resize(cols, rows); errors.Is(err, os.ErrClosed) {
		return ErrClosed
	} else if err != nil {
		return err
	}
	t.cols, t.rows = cols, rows
	t.recorded(t.rec.Load(), func(r *Recording, now time.Time) bool { return r.resize(cols, rows, now) })
	return nil
}

// Close ends the shell at once: it kills every process of the shell and
// waits until the reader has put the last output in the ring and the
// terminal is done. Calling it again waits the same way. If the kill
// fails, Close returns the error without waiting; the terminal keeps
// running (and counting against its limits) until a later Close kills it
// or the shell ends.
func (t *Terminal) Close() error {
	t.closeMu.Lock()
	if !t.killed {
		t.mu.Lock()
		t.closing = true
		t.mu.Unlock()
		t.out.unpace()
		select {
		case <-t.done:
		default:
			if err := t.kill(); err != nil {
				t.closeMu.Unlock()
				return fmt.Errorf("terminal: kill the shell: %w", err)
			}
		}
		t.killed = true
	}
	t.closeMu.Unlock()
	<-t.done
	t.mgr.forget(t)
	return nil
}

// read moves PTY output into the ring until the PTY has no writer left.
func (t *Terminal) read() {
	defer close(t.readerDone)
	buf := make([]byte, readChunk)
	for {
		t.out.waitRoom()
		t.mu.Lock()
		exited := t.exited
		t.mu.Unlock()
		if exited {
			// Something the shell left holds the PTY open; give it a short
			// while to finish writing rather than waiting for it forever.
			t.stream.SetReadDeadline(time.Now().Add(t.cfg.ExitGrace))
		}
		n, err := t.stream.Read(buf)
		if n > 0 {
			// The bytes are recorded before viewers see them, in the
			// recording under way then: one started by someone who saw
			// them starts after, and a resize made on seeing them comes
			// after them.
			t.recorded(t.rec.Load(), func(r *Recording, now time.Time) bool { return r.output(buf[:n], now) })
			t.out.writePaced(buf[:n])
		}
		if err != nil {
			// EIO: every slave descriptor is closed. A deadline or a closed
			// master: we stopped waiting. Any of them ends the output.
			return
		}
	}
}

// wait collects the shell's exit, takes down what it left behind, and ends
// the terminal once the reader is done.
func (t *Terminal) wait() {
	e, err := t.proc.Wait()
	if err != nil && e.Code == 0 && e.Signal == "" {
		e = Exit{Code: -1}
	}
	t.mu.Lock()
	t.exit, t.exited = e, true
	t.mu.Unlock()
	t.stream.SetReadDeadline(time.Now().Add(t.cfg.ExitGrace))
	t.kill() // best effort: leftovers only hold the PTY open, and the deadline ends the reader
	<-t.readerDone

	t.in.close()
	t.mu.Lock()
	// Resize checks ended under t.mu, so it never meets the closed stream.
	t.ended = true
	t.stream.Close() // unblocks a writer stuck on a full PTY
	t.mu.Unlock()
	t.StopRecording() // the shell's last output is in it; none is an answer too
	t.out.End(e)      // viewers send the exit event once they have the rest
	<-t.writerDone
	t.mu.Lock()
	closing := t.closing
	t.mu.Unlock()
	t.mgr.shellEnded(t, closing)
	close(t.done)
}
