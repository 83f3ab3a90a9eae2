package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/testrig/wait"
)

// serveThroughRun serves h's app with the listener and http.Server that Run
// builds (httptest.Server has its own), and points h's clients at it.
func serveThroughRun(t *testing.T, h *harness) *connListener {
	t.Helper()
	cfg := h.cfg
	cfg.Addr = "127.0.0.1:0"
	ln, err := listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(cfg, h.app.Handler)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h.srv.URL = "http://" + ln.Addr().String()
	return ln
}

// dialerFrom connects from ip, one of the loopback addresses 127.0.0.0/8,
// so one machine plays several clients.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
}

// slowBody opens a connection from ip and starts a sign-in whose body never
// arrives: the headers promise 1000 bytes, one is sent.
func slowBody(t *testing.T, addr, ip string) net.Conn {
	t.Helper()
	c, err := dialerFrom(ip).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: atelier\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nu")
	return c
}

// closedByServer reports whether the server has closed c (it reads EOF or
// a reset within wait; a response before the close is read past).
func closedByServer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// healthzFrom times an honest client's GET /healthz from ip.
func healthzFrom(t *testing.T, base, ip string) time.Duration {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialerFrom(ip).DialContext}}
	defer client.CloseIdleConnections()
	start := time.Now()
	res, err := client.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("healthz from %s: %v", ip, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("healthz from %s: %d", ip, res.StatusCode)
	}
	return time.Since(start)
}

// 200 connections from one address, each holding a sign-in whose body never
// comes: the address keeps its bound's worth, the rest are closed at once,
// and a client at another address is answered promptly throughout.
func TestConnPerAddressBound(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxConnsPerAddr = 20 })
	ln := serveThroughRun(t, h)
	addr := ln.Addr().String()
	attacker := netip.MustParseAddr("127.0.0.1")
	conns := make([]net.Conn, 200)
	for i := range conns {
		conns[i] = slowBody(t, addr, "127.0.0.1")
	}
	refused := 0
	for _, c := range conns {
		if closedByServer(c, 50*time.Millisecond) {
			refused++
		}
	}
	if held := ln.openFrom(attacker); held != 20 || refused != 180 {
		t.Fatalf("the attacker holds %d connections and %d were refused; want 20 and 180", held, refused)
	}
	for range 5 {
		if d := healthzFrom(t, h.srv.URL, "127.0.0.2"); d > time.Second {
			t.Fatalf("an honest client's /healthz took %v beside the attack", d)
		}
	}
	// Closing frees the places.
	for _, c := range conns {
		c.Close()
	}
	wait.ForNil(t, wait.Short, "the closed connections' places to be free", func() error {
		if n := ln.openFrom(attacker); n != 0 {
			return fmt.Errorf("%d still taken", n)
		}
		return nil
	})
	healthzFrom(t, h.srv.URL, "127.0.0.1")
}

// The total bound holds across addresses; a trusted proxy's connections
// carry many clients and are not bounded per address, only in total.
func TestConnTotalBoundAndTrustedProxy(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.MaxConnsPerAddr = 10
		c.MaxConns = 25
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.9/32")}
	})
	ln := serveThroughRun(t, h)
	addr := ln.Addr().String()
	var conns []net.Conn
	for range 15 {
		conns = append(conns, slowBody(t, addr, "127.0.0.9"))
	}
	for _, c := range conns {
		if closedByServer(c, 50*time.Millisecond) {
			t.Fatal("a trusted proxy's connection was refused under the per-address bound")
		}
	}
	refused := 0
	for _, ip := range []string{"127.0.0.3", "127.0.0.4"} {
		for range 10 {
			if closedByServer(slowBody(t, addr, ip), 50*time.Millisecond) {
				refused++
			}
		}
	}
	if refused != 10 {
		t.Fatalf("%d of 20 connections past a total of 25 (15 held) were refused, want 10", refused)
	}
}

// A body trickling a byte every few seconds is cut after the grace; an
// honest body slower than the grace but above the minimum rate is not.
func TestConnSlowBodyIsCut(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.BodyGrace = 2 * time.Second })
	ln := serveThroughRun(t, h)
	c := slowBody(t, ln.Addr().String(), "127.0.0.5")
	start := time.Now()
	sent := 1
	cut := false
	for time.Since(start) < 15*time.Second {
		if closedByServer(c, 3*time.Second) {
			cut = true
			break
		}
		if _, err := c.Write([]byte("x")); err != nil {
			cut = true
			break
		}
		sent++
	}
	if elapsed := time.Since(start); !cut || elapsed > 8*time.Second {
		t.Fatalf("a trickling body (%d of 1000 bytes sent) was not cut within %v (cut=%v)", sent, elapsed, cut)
	}
}

// A large upload on a slow line outlives the grace and still arrives whole,
// because the deadline moves with each byte that arrives.
func TestConnSlowHonestBodyFits(t *testing.T) {
	cfg := Config{Addr: "127.0.0.1:0", MaxConnsPerAddr: 8, BodyGrace: time.Second, BodyMinRate: 16 << 10}
	ln, err := listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprint(w, n)
	}))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	// 96 KiB at about 32 KiB/s: three seconds, three times the grace.
	const size, chunk = 96 << 10, 4 << 10
	body, w := io.Pipe()
	go func() {
		for range size / chunk {
			time.Sleep(125 * time.Millisecond) // not a wait: the slow client itself
			w.Write(make([]byte, chunk))
		}
		w.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/", body)
	req.ContentLength = size
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || string(got) != strconv.Itoa(size) {
		t.Fatalf("a slow honest upload after %v: %d %s", time.Since(start), res.StatusCode, got)
	}
}

// Streams send for longer than the grace: a request without a body gets
// no read deadline, and a terminal's input (with a body) is paced alike.
func TestConnStreamOutlivesGrace(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.BodyGrace = 500 * time.Millisecond })
	serveThroughRun(t, h)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.input(base, term.ID, 1, "sleep 2; echo late-$((6*7))\r"); res.StatusCode != http.StatusOK {
		t.Fatalf("input: %d %s", res.StatusCode, readBody(res))
	}
	out, _ := owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "late-42")
	if !strings.Contains(out, "late-42") {
		t.Fatalf("stream %q", out)
	}
}

// Sign-in over HTTP: past the free failures an account answers 429
// too_many_attempts with Retry-After, even for the right password, and lets
// it in once the wait is over.
func TestLoginThrottledPerAccount(t *testing.T) {
	h := newHarness(t)
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "password-ann", false); err != nil {
		t.Fatal(err)
	}
	c := h.anonymous()
	login := func(password string) *http.Response {
		return c.post("/login", url.Values{"username": {"ann"}, "password": {password}}, jsonAccept)
	}
	for range 5 {
		expectProblem(t, login("wrong"), http.StatusUnauthorized, "bad_credentials")
	}
	res := login("password-ann")
	if res.Header.Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q, want 1", res.Header.Get("Retry-After"))
	}
	expectProblem(t, res, http.StatusTooManyRequests, "too_many_attempts")
	h.clock.Advance(time.Second)
	if res := login("password-ann"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the right password after the wait: %d %s", res.StatusCode, readBody(res))
	}
}

// One address guessing many accounts is throttled, and a forged
// X-Forwarded-For does not make it another address; only a proxy the
// operator trusts is believed.
func TestLoginThrottledPerAddress(t *testing.T) {
	guess := func(c *client, i int, forwarded string) *http.Response {
		hdr := header{"Accept": "application/json"}
		if forwarded != "" {
			hdr["X-Forwarded-For"] = forwarded
		}
		return c.post("/login", url.Values{"username": {fmt.Sprintf("user%d", i)}, "password": {"wrong"}}, hdr)
	}
	h := newHarness(t)
	c := h.anonymous()
	for i := range 20 {
		expectProblem(t, guess(c, i, fmt.Sprintf("198.51.100.%d", i)), http.StatusUnauthorized, "bad_credentials")
	}
	res := guess(c, 20, "198.51.100.99")
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("a throttled address got no Retry-After")
	}
	expectProblem(t, res, http.StatusTooManyRequests, "too_many_attempts")

	// Behind a trusted proxy, each forwarded client has its own record.
	h = newHarness(t, func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	c = h.anonymous()
	for i := range 30 {
		expectProblem(t, guess(c, i, fmt.Sprintf("198.51.100.%d", i)), http.StatusUnauthorized, "bad_credentials")
	}
	for i := range 20 {
		guess(c, 100+i, "203.0.113.7")
	}
	expectProblem(t, guess(c, 200, "203.0.113.7"), http.StatusTooManyRequests, "too_many_attempts")
}

// The bounds read from the environment, their defaults, and refusals.
func TestConnLimitsConfig(t *testing.T) {
	load := func(env map[string]string) (Config, error) {
		return LoadConfig(func(k string) string { return env[k] })
	}
	cfg, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConnsPerAddr != 128 || cfg.MaxConns != 0 || cfg.BodyGrace != 30*time.Second || cfg.BodyMinRate != 8192 || cfg.TrustedProxies != nil {
		t.Fatalf("defaults %+v", cfg)
	}
	cfg, err = load(map[string]string{"ATELIER_MAX_CONNS_PER_ADDR": "7", "ATELIER_MAX_CONNS": "900",
		"ATELIER_BODY_GRACE_MS": "1500", "ATELIER_BODY_MIN_RATE": "1024", "ATELIER_TRUSTED_PROXIES": "10.0.0.1/32, fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxConnsPerAddr != 7 || cfg.MaxConns != 900 || cfg.BodyGrace != 1500*time.Millisecond || cfg.BodyMinRate != 1024 || len(cfg.TrustedProxies) != 2 {
		t.Fatalf("set %+v", cfg)
	}
	for k, v := range map[string]string{"ATELIER_MAX_CONNS_PER_ADDR": "0", "ATELIER_MAX_CONNS": "-1",
		"ATELIER_BODY_GRACE_MS": "5", "ATELIER_BODY_MIN_RATE": "fast", "ATELIER_TRUSTED_PROXIES": "proxy.local"} {
		if _, err := load(map[string]string{k: v}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}

// The total keeps the database pool and the reserve out of reach of
// connections; a small limit gives them half.
func TestConnBudget(t *testing.T) {
	if got := connBudget(1<<20, 20); got != 1<<20-20-reservedFDs {
		t.Fatalf("budget of 1048576 descriptors: %d", got)
	}
	if got := connBudget(1024, 20); got != 512 {
		t.Fatalf("budget of 1024 descriptors: %d", got)
	}
}

// openFrom is how many connections addr has open now.
func (l *connListener) openFrom(addr netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byAddr[addr]
}

// The pacer lets a burst through at once, then one connection per period:
// 1,200 connections at once at 2,000 a second past a burst of 200 wait
// half a second in all, and after a quiet second the burst is whole again.
func TestAcceptPacerSpendsABurstThenPaces(t *testing.T) {
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var slept time.Duration
	p := newAcceptPacer(2000, 200)
	p.now = func() time.Time { return clock }
	p.sleep = func(d time.Duration) { slept += d; clock = clock.Add(d) }
	for range 200 {
		p.wait()
	}
	if slept != 0 {
		t.Fatalf("the burst waited %v", slept)
	}
	for range 1000 {
		p.wait()
	}
	if want := 500 * time.Millisecond; slept != want {
		t.Fatalf("1,000 past the burst waited %v, want %v", slept, want)
	}
	clock = clock.Add(time.Second)
	before := slept
	for range 200 {
		p.wait()
	}
	if slept != before {
		t.Fatalf("after a quiet second the burst waited %v", slept-before)
	}
	var none *acceptPacer
	none.wait() // unpaced: ATELIER_ACCEPT_RATE=0
}

// A client that never reads gets little of a response before the server's
// writes wait: the kernel holds at most unsentBytes unsent for it, beyond
// what the client's own window takes, where it would otherwise grow a
// send buffer of megabytes. So a stalled reader is found, and costs the
// server, in KiB.
func TestConnUnreadResponseHoldsLittle(t *testing.T) {
	cfg := Config{Addr: "127.0.0.1:0", MaxConnsPerAddr: 8}
	ln, err := listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	taken := make(chan int, 1)
	srv := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		chunk, n := make([]byte, 4<<10), 0
		for {
			rc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := w.Write(chunk); err != nil {
				break
			}
			if err := rc.Flush(); err != nil {
				break
			}
			n += len(chunk)
		}
		taken <- n
	}))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case n := <-taken:
		t.Logf("the server wrote %d KiB before its writes waited", n>>10)
		if n > 1<<20 {
			t.Fatalf("the server wrote %d KiB to a client that reads nothing", n>>10)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server's writes never waited")
	}
}
