package terminal

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"atelier/sandbox"
)

// TestMain starts the sandbox's init helper first, for the jailed
// benchmarks.
func TestMain(m *testing.M) {
	sandbox.Init()
	goleak.VerifyTestMain(m)
}

// bash returns a Starter that runs script the way the sandbox runs a
// shell: on the tty, in a new session whose controlling terminal it is.
func bash(script string) Starter {
	return func(tty *os.File) (Process, error) {
		cmd := exec.Command("/bin/bash", "--noprofile", "--norc", "-c", script)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm", "LC_ALL=C.UTF-8", "HOME=/tmp"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return cmdProcess{cmd}, nil
	}
}

// newManager returns a Manager that closes with the test.
func newManager(t testing.TB, cfg Config) *Manager {
	m := NewManager(cfg)
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

// openShell opens a terminal running script for account "ann".
func openShell(t testing.TB, m *Manager, script string, opts Options) *Terminal {
	t.Helper()
	term, err := m.Open("ann", bash(script), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return term
}

// serve mounts the terminal's handlers the way the lead will: errors
// before streaming become a status.
func serve(t testing.TB, term *Terminal) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch r.URL.Path {
		case "/stream":
			err = term.ServeStream(w, r)
		case "/input":
			err = term.ServeInput(w, r)
		default:
			err = ErrNotFound
		}
		if err != nil {
			http.Error(w, err.Error(), statusOf(err))
		}
	}))
	t.Cleanup(func() {
		// A stream that a failed test left open would hold Close forever.
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// statusOf answers as handlers.ProblemOf does for the kinds of these errors;
// the test server cannot import handlers, which sit above terminal.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrAccountShells), errors.Is(err, ErrInstanceShells), errors.Is(err, ErrInputFull), errors.Is(err, ErrViewers):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrInputTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrClosed):
		return http.StatusGone
	default:
		return http.StatusBadRequest
	}
}

// event is one SSE event, or a comment line when comment is set.
type event struct {
	name, id, data string
	comment        string
}

// offset is the event's id as a number.
func (e event) offset(t testing.TB) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(e.id, 10, 64)
	if err != nil {
		t.Fatalf("event %q has id %q", e.name, e.id)
	}
	return n
}

// bytes decodes an out event's data.
func (e event) bytes(t testing.TB) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(e.data)
	if err != nil {
		t.Fatalf("out event data: %v", err)
	}
	return b
}

// stream is a client of ServeStream.
type stream struct {
	t      testing.TB
	res    *http.Response
	events chan event
	done   chan struct{}
	err    error // why the event loop stopped; read after done
}

// dial opens a stream of srv; lastID, when not empty, is sent as
// Last-Event-ID, and query is added to the URL.
func dial(t testing.TB, srv *httptest.Server, lastID, query string) *stream {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+"/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("stream: %s: %s", res.Status, b)
	}
	s := &stream{t: t, res: res, events: make(chan event, 64), done: make(chan struct{})}
	go s.loop()
	t.Cleanup(s.close)
	return s
}

func (s *stream) loop() {
	defer close(s.done)
	defer close(s.events)
	br := bufio.NewReaderSize(s.res.Body, 64<<10)
	var e event
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			s.err = err
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if e != (event{}) {
				s.events <- e // close drains the channel
			}
			e = event{}
		case strings.HasPrefix(line, ":"):
			e.comment = strings.TrimSpace(line[1:])
		default:
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "event":
				e.name = v
			case "id":
				e.id = v
			case "data":
				e.data += v
			}
		}
	}
}

// next returns the next event or comment, failing the test after wait.
func (s *stream) next(wait time.Duration) event {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			s.t.Fatalf("stream ended: %v", s.err)
		}
		return e
	case <-time.After(wait):
		s.t.Fatalf("no event within %v", wait)
		return event{}
	}
}

// close drops the connection and waits for the event loop to stop.
func (s *stream) close() {
	s.res.Body.Close()
	for range s.events {
	}
	<-s.done
}

// collect reads out events until exit and returns the bytes in order,
// the exit event, and the number of gap events. It checks that every
// event's id continues from the last.
func (s *stream) collect(from uint64, wait time.Duration) ([]byte, event, int) {
	s.t.Helper()
	var out bytes.Buffer
	gaps := 0
	off := from
	for {
		e := s.next(wait)
		switch e.name {
		case "out":
			b := e.bytes(s.t)
			off += uint64(len(b))
			if e.offset(s.t) != off {
				s.t.Fatalf("out event id %s, want %d", e.id, off)
			}
			out.Write(b)
		case "gap":
			gaps++
			n, _ := strconv.ParseUint(e.data, 10, 64)
			off += n
			if e.offset(s.t) != off {
				s.t.Fatalf("gap of %s with id %s, want id %d", e.data, e.id, off)
			}
		case "exit":
			return out.Bytes(), e, gaps
		}
	}
}

// waitFor polls cond until it holds, failing the test after wait.
func waitFor(t testing.TB, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", wait, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// randomFile writes n pseudo-random bytes (fixed seed) to a temporary file.
func randomFile(t testing.TB, n int, seed uint64) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	x := seed | 1
	for i := range b {
		// xorshift64*: cheap and fills every byte value.
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		b[i] = byte((x * 2685821657736338717) >> 56)
	}
	path := fmt.Sprintf("%s/random-%d", t.TempDir(), n)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, b
}

// cmdProcess adapts a started exec.Cmd to Process: the tests run plain
// processes where the server runs sandboxed ones.
type cmdProcess struct{ c *exec.Cmd }

func (p cmdProcess) Pid() int { return p.c.Process.Pid }

func (p cmdProcess) Wait() (Exit, error) {
	err := p.c.Wait()
	if p.c.ProcessState == nil {
		return Exit{Code: -1}, err
	}
	if ws, ok := p.c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: unix.SignalName(ws.Signal())}, nil
	}
	return Exit{Code: p.c.ProcessState.ExitCode()}, nil
}
