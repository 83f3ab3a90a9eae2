package gitsvc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atelier/fault"
)

// Batch reads many objects through one `git cat-file --batch` process. It
// holds the repository's read lock from OpenBatch to Close, so writers wait
// for it: close it as soon as the reading is done, and always close it.
// Each Read must finish within the command timeout; the process lives until
// Close or the end of the context given to OpenBatch.
type Batch struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	stderr  *tailBuffer
	shown   []string
	ctx     context.Context // ends the process when done
	cancel  context.CancelFunc
	release func()
	timeout time.Duration
	max     int64
	expired atomic.Bool // a Read ran out of time and killed the process
	err     error       // once set, the process is out of step and Read fails
	closed  bool
}

// OpenBatch starts a cat-file reader on r under r's read lock.
func (s *Service) OpenBatch(ctx context.Context, r *Repo) (*Batch, error) {
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(ctx)
	cmd, shown := s.cmd(bctx, newCommand("cat-file", "--batch"), runOpts{repo: r})
	b := &Batch{
		cmd:     cmd,
		stderr:  &tailBuffer{max: stderrLimit},
		shown:   shown,
		ctx:     bctx,
		cancel:  cancel,
		release: release,
		timeout: s.timeout,
		max:     s.maxOutput,
	}
	cmd.Stderr = b.stderr
	stdin, err := cmd.StdinPipe()
	if err == nil {
		b.stdin = stdin
		var stdout io.ReadCloser
		if stdout, err = cmd.StdoutPipe(); err == nil {
			b.out = bufio.NewReaderSize(stdout, 64<<10)
			err = cmd.Start()
		}
	}
	if err != nil {
		cancel()
		release()
		return nil, &GitError{Args: shown, ExitCode: -1, Err: err}
	}
	return b, nil
}

// Read returns the type and content of the object name (normally a hash;
// any name without a newline works, such as "<commit>:<path>"). A missing
// object is ErrNotFound and leaves the Batch usable; any other failure
// leaves it broken. Read is safe for concurrent use, one object at a time.
func (b *Batch) Read(name string) (objType string, data []byte, err error) {
	if err := checkObjectName(name); err != nil {
		return "", nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return "", nil, errors.New("gitsvc: batch is closed")
	}
	if b.err != nil {
		return "", nil, b.err
	}
	watchdog := time.AfterFunc(b.timeout, func() {
		b.expired.Store(true)
		b.cancel()
	})
	objType, data, err = b.read(name)
	watchdog.Stop()
	if err != nil && !errors.Is(err, ErrNotFound) {
		switch {
		case b.expired.Load():
			err = fmt.Errorf("timed out after %s: %w", b.timeout, context.DeadlineExceeded)
		case b.ctx.Err() != nil:
			err = b.ctx.Err()
		}
		b.err = &GitError{Args: b.shown, ExitCode: -1, Stderr: b.stderr.String(), Err: err}
		b.cancel() // out of step for good
		return "", nil, b.err
	}
	return objType, data, err
}

// checkObjectName refuses a name cat-file would read as something else:
// one line of its input per object.
func checkObjectName(name string) error {
	if err := checkValue(name); err != nil {
		return err
	}
	if strings.ContainsAny(name, "\n") {
		return fault.Detailf(ErrBadArgument, ": object name holds a newline")
	}
	return nil
}

func (b *Batch) read(name string) (string, []byte, error) {
	if _, err := io.WriteString(b.stdin, name+"\n"); err != nil {
		return "", nil, err
	}
	return b.readAnswer(name)
}

// readAnswer reads git's answer about the object name.
func (b *Batch) readAnswer(name string) (string, []byte, error) {
	line, err := b.out.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	line = strings.TrimSuffix(line, "\n")
	_, typ, size, ok := parseHeader(line)
	if !ok {
		if strings.HasSuffix(line, " missing") || strings.HasSuffix(line, " ambiguous") {
			return "", nil, fmt.Errorf("gitsvc: object %q: %w", name, ErrNotFound)
		}
		return "", nil, fmt.Errorf("unexpected cat-file header %q", line)
	}
	data, err := readObject(b.out, size, b.max)
	if err != nil {
		return "", nil, err
	}
	return typ, data, nil
}

// ReadEach reads the objects names in order, as Read does, and hands each
// to each with its index. The names go to git ahead of the reading, by a
// writer of their own, so the objects stream back without a round trip
// apiece (for 11,500 small blobs, most of the time Read one by one took).
// Any failure, a missing object included, or an error each returns, ends
// the reading and leaves the Batch broken: the objects asked for after it
// are on their way.
func (b *Batch) ReadEach(names []string, each func(i int, objType string, data []byte) error) error {
	for _, name := range names {
		if err := checkObjectName(name); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("gitsvc: batch is closed")
	}
	if b.err != nil {
		return b.err
	}
	written := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(b.stdin, 16<<10)
		for _, name := range names {
			if _, err := w.WriteString(name + "\n"); err != nil {
				written <- err
				return
			}
		}
		written <- w.Flush()
	}()
	stopped, err := b.readEach(names, each)
	if err != nil {
		b.cancel() // ends the writer too, if git stopped reading
	}
	if werr := <-written; err == nil && werr != nil {
		err = werr
	}
	if err == nil {
		return nil
	}
	cause := err
	switch {
	case stopped:
	case b.expired.Load():
		cause = fmt.Errorf("timed out after %s: %w", b.timeout, context.DeadlineExceeded)
	case b.ctx.Err() != nil && !errors.Is(err, ErrNotFound):
		cause = b.ctx.Err()
	}
	b.err = &GitError{Args: b.shown, ExitCode: -1, Stderr: b.stderr.String(), Err: cause}
	if stopped || errors.Is(err, ErrNotFound) {
		return err // each's own error, or the missing object, as it is
	}
	return b.err
}

// readEach reads ReadEach's answers, each within the command timeout;
// stopped says the error is each's.
func (b *Batch) readEach(names []string, each func(i int, objType string, data []byte) error) (stopped bool, err error) {
	for i, name := range names {
		watchdog := time.AfterFunc(b.timeout, func() {
			b.expired.Store(true)
			b.cancel()
		})
		typ, data, err := b.readAnswer(name)
		watchdog.Stop()
		if err != nil {
			return false, err
		}
		if err := each(i, typ, data); err != nil {
			return true, err
		}
	}
	return false, nil
}

// Close ends the process and releases the read lock. It reports a failure
// of the process that Read has not already reported.
func (b *Batch) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	defer b.release()
	defer b.cancel()
	b.stdin.Close() // cat-file exits at the end of its input
	watchdog := time.AfterFunc(b.timeout, b.cancel)
	err := b.cmd.Wait()
	watchdog.Stop()
	if err != nil && b.err == nil {
		ge := &GitError{Args: b.shown, ExitCode: -1, Stderr: b.stderr.String(), Err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ge.ExitCode = ee.ExitCode()
		}
		return ge
	}
	return nil
}
