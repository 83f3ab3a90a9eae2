// Package flakynet is a TCP proxy on loopback whose network can fail the
// ways a real one does: connections reset, a partition that keeps
// connections open and moves nothing, and connections whose route is gone
// without a word. Tests put it between a client (a browser, ttyd's page)
// and a server to see what a person would see through each drop.
package flakynet

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Mode is what the network does with connections.
type Mode int

const (
	// Pass moves bytes both ways.
	Pass Mode = iota
	// Reset resets every open connection now (SO_LINGER 0, so the peers
	// get RST, not FIN), and every new one as it arrives. Stranded
	// connections are left as they are: no reset reaches them either.
	Reset
	// Hole keeps connections open and moves nothing, new ones included
	// (accepted, and connected to the target, which hears nothing): a
	// partition. Neither end nor reset crosses it. On Pass the held bytes
	// move again, as when a partition heals and TCP retransmits.
	Hole
	// Strand cuts the connections open now for good: they never move a
	// byte again and are never closed, as when a route goes away silently
	// (a NAT forgets them, the laptop changes networks). New connections
	// pass.
	Strand
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Reset:
		return "reset"
	case Hole:
		return "hole"
	case Strand:
		return "strand"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// bufSize is what one direction of one connection holds at most: a copy
// the network pauses blocks with one buffer read, and the kernel's flow
// control stops the sender after that.
const bufSize = 32 << 10

// dialTimeout bounds the connection to the target, which is on loopback.
const dialTimeout = 5 * time.Second

// Proxy forwards connections from its own loopback address to a target,
// through a network Set decides.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // cancelled by Close, ends dials under way
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	moved  *sync.Cond // broadcast when the mode or a link changes, on mu
	mode   Mode
	links  map[*link]struct{}
	closed bool
}

// link is one client's connection and the proxy's to the target.
type link struct {
	client, server *net.TCPConn
	stranded       bool // never moves again; guarded by Proxy.mu
	dead           bool // reset or closed; guarded by Proxy.mu
	open           int  // directions still copying; guarded by Proxy.mu
}

// Listen starts a proxy on 127.0.0.1 with a port of its own, forwarding to
// target ("host:port"), with the network passing.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.moved = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's address as an HTTP base URL.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Set changes what the network does from now on.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	switch m {
	case Reset:
		// A stranded link's route is gone: not even a reset reaches its
		// peers. It stays as it is until Close.
		for l := range p.links {
			if !l.stranded {
				p.resetLocked(l)
			}
		}
	case Strand:
		for l := range p.links {
			l.stranded = true
		}
	}
	p.moved.Broadcast()
}

// Close closes the listener and every connection, stranded ones too, and
// returns once every goroutine of the proxy has ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	p.cancel()
	for l := range p.links {
		p.closeLocked(l)
	}
	p.moved.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or the like: a moment, and on.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.serve(c.(*net.TCPConn))
	}
}

// serve connects client to the target, unless the network resets it.
func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	if p.current() == Reset {
		reset(client)
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	sc, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		// The target refused: so does the proxy, as abruptly.
		reset(client)
		return
	}
	l := &link{client: client, server: sc.(*net.TCPConn), open: 2}
	p.mu.Lock()
	if p.closed || p.mode == Reset {
		// The network changed while the target answered.
		p.mu.Unlock()
		reset(l.client)
		reset(l.server)
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(l, l.server, l.client)
	go p.pipe(l, l.client, l.server)
}

func (p *Proxy) current() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// pipe copies src to dst through the network. Whatever a read brings (bytes,
// an end, an error) waits for the network to let it through: a FIN or a
// reset moves no more across a partition than data does.
func (p *Proxy) pipe(l *link, dst, src *net.TCPConn) {
	defer p.wg.Done()
	defer p.done(l)
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if !p.mayMove(l) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				p.reset(l) // the other side is gone: say so to this one
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			// A half close, passed on: HTTP clients and servers both
			// may send their last bytes after the other side's FIN.
			_ = dst.CloseWrite()
			return
		default:
			p.reset(l) // a reset, passed on as one
			return
		}
	}
}

// mayMove waits until the network moves l's bytes, and says false when l is
// gone (reset or the proxy closed) instead.
func (p *Proxy) mayMove(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed || l.dead {
			return false
		}
		if !l.stranded && p.mode != Hole {
			return true
		}
		p.moved.Wait()
	}
}

// done notes that one direction of l stopped; once both have, the link
// is closed and forgotten.
func (p *Proxy) done(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.open--
	if l.open == 0 {
		p.closeLocked(l)
	}
}

func (p *Proxy) reset(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked(l)
}

// resetLocked resets both of l's connections: each peer gets an RST.
func (p *Proxy) resetLocked(l *link) {
	if l.dead {
		return
	}
	reset(l.client)
	reset(l.server)
	p.forgetLocked(l)
}

// closeLocked closes both of l's connections (a FIN, or an RST where
// bytes were left unread, as the kernel decides).
func (p *Proxy) closeLocked(l *link) {
	if l.dead {
		return
	}
	l.client.Close()
	l.server.Close()
	p.forgetLocked(l)
}

func (p *Proxy) forgetLocked(l *link) {
	l.dead = true
	delete(p.links, l)
	p.moved.Broadcast() // its copies may be waiting in mayMove
}

// reset closes c with SO_LINGER 0, so its peer gets an RST.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	c.Close()
}
