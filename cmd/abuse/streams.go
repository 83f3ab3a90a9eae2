package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"atelier/testrig/liveserver"
)

// stalledWindow is the receive buffer of a stalled reader's socket: small,
// so that the server's writes to it stop after a few events rather than
// after the megabytes a default window takes.
const stalledWindow = 4096

// deliveryBound is how late an honest subscriber may get an event.
const deliveryBound = time.Second

// stalledReaders has a read-only member open n streams of a project's
// events that never read, while the owner opens and discards edit
// sessions (two events each, cycles times) and follows the same stream
// honestly. Every event must reach the owner within deliveryBound of the
// answer to the request that caused it, and every stalled stream must be
// ended by the server.
//
// Behind a balancer (parked) the stalled streams are the balancer's to
// hold: its socket to each stalled reader takes what the instance sends
// (the kernel grows its send buffer, some 150 KiB a stream here), so the
// instance's writes never block and it has nothing to end. There the
// balancer bounds them (connections per client, its timeouts) and the
// row asks only that the honest owner is not held back and the instances'
// memory stays bounded; the instance's own ending of a stalled stream is
// the direct run's, and TestStalledReadersOfProjectEvents'.
func stalledReaders(addr string, parked bool, c *client, n, cycles int) (string, bool) {
	id, err := c.CreateProject("abuse-stalled")
	if err != nil {
		return err.Error(), false
	}
	const name, password = "stalled-reader", "stalled-reader-password"
	if err := c.Post("/admin/users", url.Values{"username": {name}, "password": {password}}); err != nil {
		return err.Error(), false
	}
	if err := c.Post(fmt.Sprintf("/projects/%d/members", id), url.Values{"username": {name}, "role": {"member"}}); err != nil {
		return err.Error(), false
	}
	reader, err := liveserver.SignIn(c.Base, name, password)
	if err != nil {
		return err.Error(), false
	}
	path := fmt.Sprintf("/projects/%d/events", id)
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for i := range n {
		conn, err := stalledStream(attackerDialer(i), addr, path, reader.CookieHeader())
		if err != nil {
			return fmt.Sprintf("stalled reader %d: %v", i+1, err), false
		}
		conns = append(conns, conn)
	}

	// The owner follows the same stream and notes when each event comes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HC.Do(req)
	if err != nil {
		return err.Error(), false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "honest stream: " + resp.Status, false
	}
	var mu sync.Mutex
	arrived := map[string]time.Time{} // "type session" → when it came
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var row struct {
				Type string `json:"type"`
				Data struct {
					Session string `json:"session"`
				} `json:"data"`
			}
			if json.Unmarshal([]byte(data), &row) == nil {
				mu.Lock()
				arrived[row.Type+" "+row.Data.Session] = time.Now()
				mu.Unlock()
			}
		}
	}()

	// The same keys → when the request that caused the event was answered:
	// the event is recorded before the answer, so anything later is the
	// bus's delay.
	caused := map[string]time.Time{}
	for range cycles {
		base, err := c.openSession(id)
		if err != nil {
			return err.Error(), false
		}
		sid := base[strings.LastIndexByte(base, '/')+1:]
		caused["code.session.opened "+sid] = time.Now()
		if err := c.Post(base+"/discard", nil); err != nil {
			return err.Error(), false
		}
		caused["code.session.closed "+sid] = time.Now()
	}
	time.Sleep(deliveryBound)

	mu.Lock()
	var late []time.Duration
	missing := 0
	for key, at := range caused {
		got, ok := arrived[key]
		if !ok {
			missing++
			continue
		}
		late = append(late, max(got.Sub(at), 0))
	}
	mu.Unlock()
	worst := time.Duration(0)
	for _, d := range late {
		worst = max(worst, d)
	}

	detail := fmt.Sprintf("owner got %d of %d events, after the answer p50 %s / p99 %s / max %s",
		len(late), len(caused), ms(liveserver.Percentile(late, 50)), ms(liveserver.Percentile(late, 99)), ms(worst))
	delivered := missing == 0 && worst <= deliveryBound
	if parked {
		return detail + fmt.Sprintf("; %d stalled readers parked in the balancer", n), delivered
	}
	// Each stalled stream is ended by the server: its connection reaches
	// its end (or a reset) once the bytes it holds are read.
	dropped := 0
	for _, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) {
			dropped++
		}
	}
	return detail + fmt.Sprintf("; %d of %d stalled readers dropped", dropped, n), delivered && dropped == n
}

// stalledStream opens path with cookie over a connection whose receive
// window is stalledWindow, reads the answer's head and returns the
// connection, never to read it again.
func stalledStream(d *net.Dialer, addr, path, cookie string) (net.Conn, error) {
	d.Control = func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stalledWindow)
		})
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nCookie: %s\r\n\r\n", path, addr, cookie)
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, errors.New(resp.Status)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}
