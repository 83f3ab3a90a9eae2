package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"atelier/sandbox"
)

// podConsole is a shell in a pod, on the terminal of one exec stream:
// output through a pipe with deadlines, input through a bounded queue that
// the stream drains, and window sizes through a channel that keeps only
// the latest.
type podConsole struct {
	out    net.Conn // the reading end; the exec writes into its peer
	in     *inputBuffer
	sizes  chan TerminalSize
	cancel context.CancelFunc
	done   chan struct{} // closed once the exec has ended
	exit   sandbox.ShellExit
	err    error
	closed sync.Once
}

// consoleInputBytes bounds the input waiting for the stream to carry it:
// the terminal above queues the rest, as it does before a PTY.
const consoleInputBytes = 64 << 10

// startConsole runs argv on a terminal of cols×rows in the pod's
// container. The stream lives until Kill or Close, or until the shell
// ends.
func startConsole(e *Exec, pod, container string, argv []string, cols, rows int) *podConsole {
	ctx, cancel := context.WithCancel(context.Background())
	read, write := net.Pipe()
	c := &podConsole{
		out: read, in: newInputBuffer(consoleInputBytes),
		sizes: make(chan TerminalSize, 1), cancel: cancel, done: make(chan struct{}),
	}
	c.sizes <- TerminalSize{Cols: uint16(cols), Rows: uint16(rows)}
	go func() {
		defer close(c.done)
		defer write.Close() // the reader then meets the end of the output
		code, err := e.Run(ctx, pod, argv, ExecOptions{Container: container, Stdin: c.in, Stdout: write, TTY: true, Sizes: c.sizes})
		c.in.Close()
		switch {
		case ctx.Err() != nil:
			c.exit = sandbox.ShellExit{Code: -1, Signal: "SIGKILL"}
		case err != nil:
			c.exit, c.err = sandbox.ShellExit{Code: -1}, err
		default:
			c.exit = sandbox.ShellExit{Code: code}
		}
	}()
	return c
}

func (c *podConsole) Read(p []byte) (int, error)        { return c.out.Read(p) }
func (c *podConsole) SetReadDeadline(t time.Time) error { return c.out.SetReadDeadline(t) }
func (c *podConsole) Write(p []byte) (int, error)       { return c.in.Write(p) }
func (c *podConsole) TryWrite(p []byte) int             { return c.in.TryWrite(p) }

// Resize replaces a size the stream has not sent yet, so a drag of the
// window never queues.
func (c *podConsole) Resize(cols, rows int) error {
	select {
	case <-c.done:
		return fmt.Errorf("kube: resize: %w", os.ErrClosed)
	default:
	}
	size := TerminalSize{Cols: uint16(cols), Rows: uint16(rows)}
	for {
		select {
		case c.sizes <- size:
			return nil
		default:
		}
		select {
		case <-c.sizes:
		default:
		}
	}
}

// Wait blocks until the stream ends: the shell's exit code, or SIGKILL
// when it was killed.
func (c *podConsole) Wait() (sandbox.ShellExit, error) {
	<-c.done
	return c.exit, c.err
}

// Kill ends the stream; the shell's helper in the pod takes the loss of
// its terminal for a hang-up and ends everything the shell started.
func (c *podConsole) Kill() error {
	c.cancel()
	select {
	case <-c.done:
		return nil
	case <-time.After(consoleKillWait):
		return fmt.Errorf("kube: the shell's stream outlived its end for %s", consoleKillWait)
	}
}

// consoleKillWait bounds how long Kill waits for the stream to go.
const consoleKillWait = 5 * time.Second

func (c *podConsole) Close() error {
	c.closed.Do(func() {
		c.cancel()
		c.in.Close()
		c.out.Close()
	})
	return nil
}

// inputBuffer is a shell's input on its way into the exec stream, which
// reads it as its stdin.
type inputBuffer struct {
	mu     sync.Mutex
	moved  sync.Cond // data added, taken, or the buffer closed
	data   []byte
	limit  int
	closed bool
}

func newInputBuffer(limit int) *inputBuffer {
	b := &inputBuffer{limit: limit}
	b.moved.L = &b.mu
	return b
}

// Write waits for room for all of p.
func (b *inputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for n < len(p) {
		for !b.closed && len(b.data) >= b.limit {
			b.moved.Wait()
		}
		if b.closed {
			return n, io.ErrClosedPipe
		}
		m := min(len(p)-n, b.limit-len(b.data))
		b.data = append(b.data, p[n:n+m]...)
		n += m
		b.moved.Broadcast()
	}
	return n, nil
}

// TryWrite takes what fits now.
func (b *inputBuffer) TryWrite(p []byte) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0
	}
	m := min(len(p), b.limit-len(b.data))
	b.data = append(b.data, p[:m]...)
	if m > 0 {
		b.moved.Broadcast()
	}
	return m
}

// Read is the stream's side: it waits for input, and ends at Close.
func (b *inputBuffer) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.closed && len(b.data) == 0 {
		b.moved.Wait()
	}
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[:copy(b.data, b.data[n:])]
	b.moved.Broadcast()
	return n, nil
}

func (b *inputBuffer) Close() error {
	b.mu.Lock()
	b.closed = true
	b.moved.Broadcast()
	b.mu.Unlock()
	return nil
}

var errNoWorkspace = errors.New("kube: the session has no prepared pod")
