package terminal

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

	"atelier/terminal/hostpty"
)

// TestMain checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Starter launches a process of the test's on a PTY of this host, which
// it must make the process's stdin, stdout, stderr and controlling
// terminal; the PTY's slave stays the server's.
type Starter func(tty *os.File) (Process, error)

func (start Starter) Launch(cols, rows int, _ Options) (Stream, Process, error) {
	return onPTY(start, cols, rows, -1, -1)
}

// owned is a Starter whose PTY's slave goes to uid and gid, as a
// session's does.
type owned struct {
	start    Starter
	uid, gid int
}

func (o owned) Launch(cols, rows int, _ Options) (Stream, Process, error) {
	return onPTY(o.start, cols, rows, o.uid, o.gid)
}

func onPTY(start Starter, cols, rows, uid, gid int) (Stream, Process, error) {
	master, tty, err := hostpty.Open(cols, rows, uid, gid)
	if err != nil {
		return nil, nil, err
	}
	defer tty.Close()
	p, err := start(tty)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, p, nil
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
	return openOn(t, m, bash(script), opts)
}

// openOn opens a terminal launched by launch for account "ann".
func openOn(t testing.TB, m *Manager, launch Launcher, opts Options) *Terminal {
	t.Helper()
	term, err := m.Open("ann", launch, opts)
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

// event is one SSE event.
type event struct{ name, id, data string }

// offset is the event's id as a number.
func (e event) offset(t testing.TB) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(e.id, 10, 64)
	if err != nil {
		t.Fatalf("event %q has id %q", e.name, e.id)
	}
	return n
}

// isOutput says whether the event carries output: text or out.
func (e event) isOutput() bool { return e.name == "text" || e.name == "out" }

// bytes decodes the output a text or out event carries: a text event's
// JSON string of valid UTF-8, an out event's base64.
func (e event) bytes(t testing.TB) []byte {
	t.Helper()
	switch e.name {
	case "text":
		var s string
		if err := json.Unmarshal([]byte(e.data), &s); err != nil {
			t.Fatalf("text event data %.40q: %v", e.data, err)
		}
		return []byte(s)
	case "out":
		b, err := base64.StdEncoding.DecodeString(e.data)
		if err != nil {
			t.Fatalf("out event data: %v", err)
		}
		return b
	}
	t.Fatalf("%s event %q carries no output", e.name, e.data)
	return nil
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
	return dialWith(t, srv.Client(), srv, lastID, query, 64)
}

// dialTight opens a stream of srv that takes from the server only what
// the test reads, and a few KiB: its socket's receive buffer is 4 KiB and
// its events wait unbuffered. Such a viewer is never ahead of one the
// test reads faster, however slowly the test runs.
func dialTight(t testing.TB, srv *httptest.Server, query string) *stream {
	t.Helper()
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	t.Cleanup(client.CloseIdleConnections)
	return dialWith(t, client, srv, "", query, 0)
}

func dialWith(t testing.TB, client *http.Client, srv *httptest.Server, lastID, query string, buffered int) *stream {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+"/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("stream: %s: %s", res.Status, b)
	}
	s := &stream{t: t, res: res, events: make(chan event, buffered), done: make(chan struct{})}
	go s.loop()
	t.Cleanup(s.close)
	return s
}

func (s *stream) loop() {
	defer close(s.done)
	defer close(s.events)
	size := 64 << 10
	if cap(s.events) == 0 { // a tight viewer reads ahead of the test by a few KiB only
		size = 4 << 10
	}
	br := bufio.NewReaderSize(s.res.Body, size)
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
			// a comment: the stream sends none
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

// next returns the next event, failing the test after wait.
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

// collect reads output events until exit and returns the bytes in order,
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
		case "text", "out":
			b := e.bytes(s.t)
			off += uint64(len(b))
			if e.offset(s.t) != off {
				s.t.Fatalf("%s event id %s, want %d", e.name, e.id, off)
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
