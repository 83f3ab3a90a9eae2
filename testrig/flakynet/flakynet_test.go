package flakynet

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet is how long a connection must stay silent to count as moving
// nothing: long enough for loopback to have moved anything many times.
const quiet = 300 * time.Millisecond

// target is a server behind the proxy that echoes what it reads and
// tells the test what it saw of each connection.
type target struct {
	ln    net.Listener
	conns chan *served // each connection, as accepted
	wg    sync.WaitGroup
}

// served is the target's side of one connection.
type served struct {
	conn  net.Conn
	read  atomic.Int64 // bytes read so far
	ended chan error   // how its reading ended: nil for a clean end
}

func echoTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan *served, 16)}
	var mu sync.Mutex
	var open []net.Conn
	tg.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			s := &served{conn: c, ended: make(chan error, 1)}
			tg.conns <- s
			tg.wg.Go(func() { s.echo() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		tg.wg.Wait()
	})
	return tg
}

// echo writes back what it reads until the client's end, which it passes
// back.
func (s *served) echo() {
	buf := make([]byte, 4096)
	for {
		n, err := s.conn.Read(buf)
		s.read.Add(int64(n))
		if n > 0 {
			if _, werr := s.conn.Write(buf[:n]); werr != nil {
				s.ended <- werr
				return
			}
		}
		if errors.Is(err, io.EOF) {
			s.ended <- s.conn.(*net.TCPConn).CloseWrite()
			return
		}
		if err != nil {
			s.ended <- err
			return
		}
	}
}

// accepted is the target's side of the next connection it accepts.
func (tg *target) accepted(t *testing.T) *served {
	t.Helper()
	select {
	case s := <-tg.conns:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the target accepted no connection")
		return nil
	}
}

// still checks that the target's side of a connection neither reads more
// than it had nor ends, for a while.
func (s *served) still(t *testing.T, what string) {
	t.Helper()
	had := s.read.Load()
	select {
	case err := <-s.ended:
		t.Fatalf("%s: the target's side ended (%v)", what, err)
	case <-time.After(quiet):
	}
	if now := s.read.Load(); now != had {
		t.Fatalf("%s: the target read %d more bytes", what, now-had)
	}
}

// end is how the target's side of a connection ended.
func (s *served) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.ended:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the target's side of the connection did not end")
		return nil
	}
}

func listen(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, text string) {
	t.Helper()
	if _, err := c.Write([]byte(text)); err != nil {
		t.Fatalf("writing %q: %v", text, err)
	}
}

// expect reads exactly text from c within a few seconds.
func expect(t *testing.T, c net.Conn, text string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(text))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %q: got %q, %v", text, got, err)
	}
	if string(got) != text {
		t.Fatalf("read %q, want %q", got, text)
	}
}

// silent checks that nothing at all comes from c for a while: no bytes, no
// end, no reset.
func silent(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(quiet))
	defer c.SetReadDeadline(time.Time{})
	var b [64]byte
	n, err := c.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %q, %v; want nothing at all", what, b[:n], err)
	}
}

// wasReset checks that c ends with a reset, not a clean end.
func wasReset(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: the read ended with %v, want a connection reset", what, err)
	}
}

func TestPassMovesBytesAndEnds(t *testing.T) {
	tg := echoTarget(t)
	p := listen(t, tg.ln.Addr().String())
	if got, want := p.URL(), "http://"+p.Addr(); got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	c := dial(t, p)
	send(t, c, "hello\n")
	expect(t, c, "hello\n")
	// A half close reaches the target, whose end comes back.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after a half close: read %q, %v; want a clean end", rest, err)
	}
}

func TestResetResetsOpenAndNewConnections(t *testing.T) {
	tg := echoTarget(t)
	p := listen(t, tg.ln.Addr().String())
	c := dial(t, p)
	send(t, c, "one\n")
	expect(t, c, "one\n")
	server := tg.accepted(t)

	p.Set(Reset)
	wasReset(t, c, "the open connection")
	if err := server.end(t); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the target's side of it ended with %v, want a connection reset", err)
	}
	// The kernel completes the handshake, the proxy resets it: the
	// client hears of it as it connects or as it reads.
	if fresh, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		wasReset(t, fresh, "a new connection")
		fresh.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connecting in a reset: %v, want a connection reset", err)
	}

	p.Set(Pass)
	again := dial(t, p)
	send(t, again, "two\n")
	expect(t, again, "two\n")
}

func TestHoleHoldsBytesUntilPass(t *testing.T) {
	tg := echoTarget(t)
	p := listen(t, tg.ln.Addr().String())
	open := dial(t, p)
	send(t, open, "before\n")
	expect(t, open, "before\n")
	openServed := tg.accepted(t)

	p.Set(Hole)
	send(t, open, "during\n")
	silent(t, open, "an open connection in a hole")
	openServed.still(t, "an open connection in a hole")
	fresh := dial(t, p)
	send(t, fresh, "new\n")
	// The client's end does not cross the hole either.
	if err := fresh.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	silent(t, fresh, "a connection made in a hole")
	tg.accepted(t).still(t, "a connection made in a hole")

	p.Set(Pass)
	expect(t, open, "during\n")
	expect(t, fresh, "new\n")
	fresh.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(fresh); err != nil || len(rest) != 0 {
		t.Fatalf("the held half close: read %q, %v; want a clean end", rest, err)
	}
}

// A connection in a hole holds back its sender: the proxy keeps one buffer
// per direction, not whatever the sender has to say.
func TestHoleHoldsNoMoreThanABuffer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := listen(t, ln.Addr().String())
	p.Set(Hole)
	c := dial(t, p)
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	const much = 64 << 20
	c.SetWriteDeadline(time.Now().Add(time.Second))
	n, err := c.Write(make([]byte, much))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writing %d bytes into a hole: %d went, %v; want the write to block", much, n, err)
	}
	// What went sits in the kernel's buffers (a few MiB at most on
	// loopback) and in the proxy's one buffer.
	if n > much/2 {
		t.Fatalf("%d bytes went into a hole before the writer was held back", n)
	}
}

func TestStrandCutsOpenConnectionsForGood(t *testing.T) {
	tg := echoTarget(t)
	p := listen(t, tg.ln.Addr().String())
	stranded := dial(t, p)
	send(t, stranded, "before\n")
	expect(t, stranded, "before\n")
	server := tg.accepted(t)

	p.Set(Strand)
	send(t, stranded, "lost\n")
	silent(t, stranded, "a stranded connection")
	fresh := dial(t, p)
	send(t, fresh, "new\n")
	expect(t, fresh, "new\n")

	p.Set(Pass)
	silent(t, stranded, "a stranded connection once the network passes")
	// Neither its end nor a reset reaches the other side.
	stranded.Close()
	p.Set(Reset)
	p.Set(Pass)
	server.still(t, "a stranded connection")
	// Close does end it.
	p.Close()
	server.end(t)
}

// Close ends every connection in every state, and every goroutine the
// proxy started, without the peers' help.
func TestCloseLeavesNothingBehind(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var clients, servers []net.Conn
	connect := func() {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		clients, servers = append(clients, c), append(servers, s)
	}
	connect() // stranded below
	p.Set(Strand)
	connect() // passing
	p.Set(Hole)
	connect() // held
	if _, err := clients[2].Write([]byte("held")); err != nil {
		t.Fatal(err)
	}

	done := make(chan error)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for i, c := range append(clients, servers...) {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d is still open after Close", i)
		}
		c.Close()
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Error("the proxy still accepts connections after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	goleak.VerifyNone(t, ignore)
}
