package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Connection and body bounds. A connection costs a descriptor and a
// goroutine whether or not its request ever completes, so slow clients are
// bounded at the socket, before any handler runs.
const (
	// headerTimeout bounds reading a request's line and headers.
	headerTimeout = 10 * time.Second
	// idleTimeout closes a kept-alive connection that sends no next request.
	idleTimeout = 2 * time.Minute
	// defaultConnsPerAddr: a browser opens at most 6 connections to a host
	// over HTTP/1.1, streams included, so 128 leaves room for an office of
	// about twenty behind one NAT address.
	defaultConnsPerAddr = 128
	// reservedFDs are descriptors kept back from connections for what the
	// server opens itself besides the database pool: commands' pipes and
	// terminals, git's children, checkouts' files, the object store.
	reservedFDs = 1024
	// defaultBodyGrace and defaultBodyMinRate pace request bodies: a body
	// gets the grace, plus one second per defaultBodyMinRate bytes it has
	// sent. 8 KiB/s is a 64 kbit/s line: a 100 MiB import at 1 Mbit/s
	// (14 minutes) is far inside it, while a body sending a byte every
	// few seconds is cut after the grace.
	defaultBodyGrace   = 30 * time.Second
	defaultBodyMinRate = 8 << 10
	// defaultAcceptRate and acceptBurst pace new connections: 200 at once,
	// then 2,000 a second, far above what people open (a page and its
	// streams are a handful), while a flood of thousands cannot put them
	// all on the run queue at once.
	defaultAcceptRate = 2000
	acceptBurst       = 200
)

// raiseFileLimit lifts the soft limit on open descriptors to the hard one
// and returns it. Go's runtime already does so at start on Linux (and puts
// the old limit back for children, which a Setrlimit of ours would undo),
// so the call only acts where the runtime did not.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("server: descriptor limit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	return lim.Cur, nil
}

// connBudget is how many connections may be open at once, out of nofile
// descriptors: the rest are the database pool's and reservedFDs. On a
// small limit, half of it.
func connBudget(nofile uint64, dbConns int) int {
	reserve := uint64(dbConns) + reservedFDs
	if nofile < 2*reserve {
		return max(int(nofile/2), 1)
	}
	return int(min(nofile-reserve, 1<<30))
}

// connListener bounds the connections open at once, in total and per
// client address.
//
// The per-address bound works on the TCP peer, before any header is read,
// so X-Forwarded-For cannot be read there. A connection from a trusted
// proxy (ATELIER_TRUSTED_PROXIES) carries many people's requests, so it
// counts only toward the total: bounding each client behind the proxy is the
// proxy's job (nginx's limit_conn, for one). Behind the proxy, the client's
// address for sign-in throttling is read from X-Forwarded-For.
type connListener struct {
	net.Listener
	perAddr int
	total   int
	trusted []netip.Prefix

	pace   *acceptPacer // nil: connections are not paced
	mu     sync.Mutex
	open   int
	byAddr map[netip.Addr]int
}

func newConnListener(ln net.Listener, perAddr, total int, trusted []netip.Prefix) *connListener {
	return &connListener{Listener: ln, perAddr: perAddr, total: total, trusted: trusted, byAddr: map[netip.Addr]int{}}
}

// acceptPacer spaces admitted connections out once a burst is spent. Each
// new connection is a goroutine with work to do at once; a flood of
// thousands would queue them all on the scheduler together, and the next
// request of someone already connected (a keystroke, /healthz) would wait
// behind every one of them. Paced, the flood waits in the kernel's accept
// queue instead, where it costs no CPU.
type acceptPacer struct {
	every time.Duration // between two connections, past the burst
	burst time.Duration // the burst, as time credit: every × its size
	next  time.Time     // when the credit is spent
	now   func() time.Time
	sleep func(time.Duration)
}

func newAcceptPacer(perSecond, burst int) *acceptPacer {
	every := time.Second / time.Duration(perSecond)
	return &acceptPacer{every: every, burst: every * time.Duration(burst), now: time.Now, sleep: time.Sleep}
}

// wait returns when the next connection may be served. Only the accept
// loop calls it, so it needs no lock.
func (p *acceptPacer) wait() {
	if p == nil {
		return
	}
	now := p.now()
	if floor := now.Add(-p.burst); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(p.every)
	if d := p.next.Sub(now); d > 0 {
		p.sleep(d)
	}
}

// Accept returns the next connection within the bounds; one past them is
// closed at once, so it holds its descriptor for no longer than that.
func (l *connListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := peerAddr(c)
		if l.take(addr) {
			l.pace.wait()
			return &countedConn{Conn: c, release: func() { l.give(addr) }}, nil
		}
		c.Close()
	}
}

func (l *connListener) take(addr netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.total {
		return false
	}
	if !l.isTrusted(addr) {
		if l.byAddr[addr] >= l.perAddr {
			return false
		}
		l.byAddr[addr]++
	}
	l.open++
	return true
}

func (l *connListener) give(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.isTrusted(addr) {
		return
	}
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

func (l *connListener) isTrusted(addr netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func peerAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// countedConn gives its place back once, however often it is closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// paceBodies cuts a request whose body arrives slower than minRate bytes a
// second after grace, by moving the connection's read deadline as the body
// arrives. A fixed http.Server.ReadTimeout cannot tell an honest large
// upload on a slow line from a trickle; this can. Requests without a body
// (the event and terminal streams among them) get no read deadline: their
// connections are watched by net/http's background read, and their writes
// have deadlines of their own.
func paceBodies(next http.Handler, grace time.Duration, minRate int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		start := time.Now()
		if err := rc.SetReadDeadline(start.Add(grace)); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = &pacedBody{ReadCloser: r.Body, rc: rc, start: start, grace: grace, minRate: minRate}
		next.ServeHTTP(w, r)
	})
}

type pacedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	start   time.Time
	grace   time.Duration
	minRate int64
	read    int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		// The body is over: net/http reads the connection from here on
		// without a deadline, to notice the client leaving. A body cut by
		// the deadline keeps it, so nothing waits for the rest of it.
		b.rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		return n, err
	}
	if n > 0 {
		b.read += int64(n)
		earned := time.Duration(float64(b.read) / float64(b.minRate) * float64(time.Second))
		b.rc.SetReadDeadline(b.start.Add(b.grace + earned))
	}
	return n, nil
}

// newHTTPServer is the http.Server Atelier serves h with. It sets no
// ReadTimeout (bodies are paced instead) and no WriteTimeout: streams set
// their own per-write deadlines.
func newHTTPServer(cfg Config, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           paceBodies(h, cfg.BodyGrace, cfg.BodyMinRate),
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		ConnContext:       connContext,
	}
}

// unsentBytes bounds what the kernel holds of a response that the client
// has made no room for yet (TCP_NOTSENT_LOWAT): a write waits while more
// than this is queued unsent. Left to itself the kernel grows a
// connection's send buffer to 4 MiB, so a client that never reads an
// event stream held that much of the server's memory, and a write blocked
// (and its deadline could end the stream) only after megabytes of events.
// A reader that keeps up is not slowed: what is in flight is not counted.
const unsentBytes = 16 << 10

// connContext prepares each connection as net/http starts serving it.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*countedConn); ok {
		c = cc.Conn
	}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				// Best effort: without it streams are still bounded by
				// their queues and write deadlines, only later.
				_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, unsentBytes)
			})
		}
	}
	return ctx
}

// listen opens cfg.Addr with the connection bounds. The total is what the
// descriptor limit leaves after the database pool and reservedFDs, or
// cfg.MaxConns when that is set and lower.
func listen(cfg Config) (*connListener, error) {
	nofile, err := raiseFileLimit()
	if err != nil {
		return nil, err
	}
	total := connBudget(nofile, cfg.Pool.MaxOpen)
	if cfg.MaxConns > 0 {
		total = min(total, cfg.MaxConns)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	cl := newConnListener(ln, cfg.MaxConnsPerAddr, total, cfg.TrustedProxies)
	if cfg.AcceptRate > 0 {
		cl.pace = newAcceptPacer(cfg.AcceptRate, acceptBurst)
	}
	return cl, nil
}
