// Package terminal runs interactive shells on PTYs for the browser: output
// goes to viewers as a Server-Sent Events stream that resumes at an exact
// byte offset, and input comes back as numbered chunks applied in order.
//
// A Manager bounds how many shells run (per account and per instance) and
// finds them again by id. Each Terminal owns one PTY master, a ring of its
// recent output, and three goroutines: a reader that moves PTY output into
// the ring, a writer that feeds queued input to the PTY, and a waiter that
// collects the shell's exit. How the shell process is started (as which
// user, in which sandbox) is the caller's business: it passes a Starter that
// is handed the PTY's slave end.
package terminal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

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

// Starter launches the shell on tty, the PTY's slave end, which it must make
// the shell's stdin, stdout, stderr and controlling terminal (Setsid and
// Setctty). The terminal closes its own copy of tty once Starter returns.
type Starter func(tty *os.File) (Process, error)

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

	// SlaveUID and SlaveGID own the PTY's slave end (mode 0620), so the
	// shell's user can reopen /dev/tty. Zero keeps the owner pty.Open gave
	// it: the server's own user and group.
	SlaveUID, SlaveGID int

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

// Terminal is one shell on a PTY.
type Terminal struct {
	id      string
	account string
	tag     any
	opened  time.Time
	cfg     Config
	master  *os.File
	proc    Process
	kill    func() error
	in      *inputQueue
	mgr     *Manager
	slot    *Slot

	mu      sync.Mutex
	drained sync.Cond // the reader waits here while a viewer lags
	out     *ring
	viewers map[*viewer]struct{}
	paused  bool // the reader waits on drained
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

// open creates the PTY and starts the shell on it; run starts the
// terminal's goroutines.
func open(account string, cfg Config, start Starter, opts Options) (*Terminal, error) {
	cols, rows := opts.Cols, opts.Rows
	if cols == 0 && rows == 0 {
		cols, rows = 80, 24
	}
	if !validSize(cols, rows) {
		return nil, ErrBadSize
	}
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("terminal: open a pty: %w", err)
	}
	p, master, err := startShell(master, tty, cols, rows, start, opts)
	if err != nil {
		return nil, err
	}
	t := &Terminal{
		id:         newID(),
		account:    account,
		tag:        opts.Tag,
		opened:     time.Now(),
		cfg:        cfg,
		master:     master,
		proc:       p,
		kill:       opts.Kill,
		in:         newInputQueue(cfg.InputBytes, tryWrite(master)),
		out:        newRing(cfg.RingBytes),
		viewers:    make(map[*viewer]struct{}),
		cols:       cols,
		rows:       rows,
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
	t.drained.L = &t.mu
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
		t.in.writeTo(t.master)
	}()
	go t.wait()
}

// startShell sizes the PTY, hands its slave to start, and returns the shell
// with a master the runtime poller drives. Every failure closes both ends.
func startShell(master, tty *os.File, cols, rows int, start Starter, opts Options) (Process, *os.File, error) {
	defer tty.Close()
	// pty.Open leaves the master in blocking mode (its ioctls go through
	// Fd). A blocking read cannot be interrupted: neither a deadline nor
	// Close would stop the reader. So take a non-blocking duplicate, which
	// os.NewFile registers with the poller.
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	master.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("terminal: duplicate the pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("terminal: pty master: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	fail := func(err error) (Process, *os.File, error) {
		master.Close()
		return nil, nil, err
	}
	if err := setSize(master, cols, rows); err != nil {
		return fail(err)
	}
	if opts.SlaveUID != 0 || opts.SlaveGID != 0 {
		uid, gid := opts.SlaveUID, opts.SlaveGID
		if uid == 0 {
			uid = -1
		}
		if gid == 0 {
			gid = -1
		}
		if err := tty.Chown(uid, gid); err != nil {
			return fail(fmt.Errorf("terminal: give the pty to the shell's user: %w", err))
		}
	}
	if err := tty.Chmod(0o620); err != nil {
		return fail(fmt.Errorf("terminal: pty mode: %w", err))
	}
	// The shell must get a blocking descriptor; Fd makes it so whatever the
	// starter does with the file.
	tty.Fd()
	p, err := start(tty)
	if err != nil {
		return fail(fmt.Errorf("terminal: start the shell: %w", err))
	}
	return p, master, nil
}

func validSize(cols, rows int) bool {
	return cols >= 1 && cols <= MaxSize && rows >= 1 && rows <= MaxSize
}

// setSize sets the window size through the poller's descriptor: pty.Setsize
// would call Fd and put the master back in blocking mode.
func setSize(f *os.File, cols, rows int) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("terminal: resize: %w", err)
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	if err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("terminal: resize: %w", err)
	}
	return nil
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
func (t *Terminal) Offset() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.end
}

// Viewers is how many viewers follow the output now.
func (t *Terminal) Viewers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.viewers)
}

// Oldest is the offset of the oldest output byte still in the ring.
func (t *Terminal) Oldest() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.start()
}

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
	if err := setSize(t.master, cols, rows); err != nil {
		return err
	}
	t.cols, t.rows = cols, rows
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
		t.drained.Broadcast()
		t.mu.Unlock()
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
		t.mu.Lock()
		t.waitForViewers(0)
		exited := t.exited
		t.mu.Unlock()
		if exited {
			// Something the shell left holds the PTY open; give it a short
			// while to finish writing rather than waiting for it forever.
			t.master.SetReadDeadline(time.Now().Add(t.cfg.ExitGrace))
		}
		n, err := t.master.Read(buf)
		if n > 0 {
			t.mu.Lock()
			t.waitForViewers(n)
			t.out.write(buf[:n])
			t.wakeViewers()
			t.mu.Unlock()
		}
		if err != nil {
			// EIO: every slave descriptor is closed. A deadline or a closed
			// master: we stopped waiting. Any of them ends the output.
			return
		}
	}
}

// waitForViewers holds the reader while an attached viewer lags. With
// n == 0 it is the high-water check before a read: a backlog above
// HighWater pauses reading until every backlog is at most LowWater. With
// n > 0 it makes room for n bytes just read, so that appending them cannot
// drop a byte an attached viewer has not sent. Either way the wait is one
// condition that each viewer's progress re-checks; there is nothing to
// reschedule, so reading resumes however long the pause was.
//
// t.mu must be held.
func (t *Terminal) waitForViewers(n int) {
	if n == 0 && t.backlog() <= t.cfg.HighWater {
		return
	}
	limit := t.cfg.LowWater
	if n > 0 {
		limit = t.out.max - n
	}
	for !t.closing && t.backlog() > limit {
		t.paused = true
		t.drained.Wait()
	}
	t.paused = false
}

// backlog is the most output any flow-controlled viewer has yet to send.
// t.mu must be held.
func (t *Terminal) backlog() int {
	most := 0
	start := t.out.start()
	for v := range t.viewers {
		if v.flow {
			most = max(most, int(t.out.end-max(v.off, start)))
		}
	}
	return most
}

// wakeViewers tells waiting viewers that something changed. Each has a
// channel of its own, made once, so waking costs no allocation however
// often the shell writes. t.mu must be held.
func (t *Terminal) wakeViewers() {
	for v := range t.viewers {
		if v.waiting {
			v.waiting = false
			select {
			case v.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
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
	t.master.SetReadDeadline(time.Now().Add(t.cfg.ExitGrace))
	t.kill() // best effort: leftovers only hold the PTY open, and the deadline ends the reader
	<-t.readerDone

	t.in.close()
	t.mu.Lock()
	// Viewers send the exit event once they see ended; Resize checks it
	// under t.mu, so it never meets the closed master.
	t.ended = true
	t.master.Close() // unblocks a writer stuck on a full PTY
	t.wakeViewers()
	t.mu.Unlock()
	<-t.writerDone
	t.mu.Lock()
	closing := t.closing
	t.mu.Unlock()
	t.mgr.shellEnded(t, closing)
	close(t.done)
}
