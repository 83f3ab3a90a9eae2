// Command abuse starts a real Atelier server and attacks it from 127.0.0.1
// while an honest client polls /healthz, then prints what held: the honest
// client's latency, the server's peak memory and descriptors, and whether
// each bound was kept. It exits non-zero when one was not.
//
//	go run ./cmd/abuse -short   # the CI run, under two minutes
//	go run ./cmd/abuse          # the full sizes of issue 12
package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atelier/internal/liveserver"
)

func main() {
	short := flag.Bool("short", false, "small sizes for CI (under two minutes)")
	flag.Parse()
	table, err := run(*short, os.Stderr)
	fmt.Print(table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "abuse:", err)
		os.Exit(1)
	}
}

// sizes are one run's attack sizes and bounds.
type sizes struct {
	slowConns     int
	slowFor       time.Duration
	wrongLogins   int
	streams       int
	downloadBytes int64
	downloads     int
	p99Bound      time.Duration
}

func sizesFor(short bool) sizes {
	if short {
		return sizes{slowConns: 200, slowFor: 10 * time.Second, wrongLogins: 100, streams: 100,
			downloadBytes: 64 << 20, downloads: 10, p99Bound: time.Second}
	}
	return sizes{slowConns: 20000, slowFor: 40 * time.Second, wrongLogins: 300, streams: 20000,
		downloadBytes: 200 << 20, downloads: 10, p99Bound: 100 * time.Millisecond}
}

const (
	victimName   = "victim"
	rssGrowthMax = 512 << 20
	streamCap    = 64
)

// row is one line of the printed table.
type row struct {
	attack, size, latency, rss, fds, result string
	failed                                  bool
}

// run builds and starts the server, runs every attack and returns the table;
// the error says which bounds failed.
func run(short bool, logw io.Writer) (string, error) {
	sz := sizesFor(short)
	srv, err := liveserver.Start(logw, "ATELIER_SANDBOX_DISK_BYTES=0", "ATELIER_IMPORT_MAX_BYTES="+strconv.Itoa(300<<20))
	if err != nil {
		return "", err
	}
	defer srv.Stop()

	c, err := liveserver.SignIn(srv.Base, "admin", liveserver.AdminPassword)
	if err != nil {
		return "", err
	}
	if err := c.Post("/admin/users", url.Values{"username": {victimName}, "password": {"victim-password-123"}}); err != nil {
		return "", fmt.Errorf("abuse: create victim: %w", err)
	}

	var rows []row
	measure := func(attack, size string, f func() (string, bool)) {
		fmt.Fprintf(logw, "abuse: %s (%s)\n", attack, size)
		rows = append(rows, measureAttack(srv, attack, size, sz.p99Bound, f))
	}
	measure("slow bodies", fmt.Sprintf("%d conns, 1 byte / 2 s, %s", sz.slowConns, sz.slowFor),
		func() (string, bool) { return slowBodies(srv.Addr, sz.slowConns, sz.slowFor) })
	measure("concurrent wrong passwords", fmt.Sprintf("%d parallel", sz.wrongLogins),
		func() (string, bool) { return wrongPasswords(srv.Base, sz.wrongLogins) })
	measure("stream flood (/admin/events)", fmt.Sprintf("%d streams, one account", sz.streams),
		func() (string, bool) { return streamFlood(srv.Addr, c, sz.streams) })
	measure("large download (/code/raw)", fmt.Sprintf("%d MiB file, %d at once", sz.downloadBytes>>20, sz.downloads),
		func() (string, bool) { return largeDownload(c, sz.downloadBytes, sz.downloads) })
	rows = append(rows,
		row{attack: "PostgreSQL restart", size: "—", latency: "—", rss: "—", fds: "—",
			result: "not run here: covered by server.TestDatabaseRestart (503 database_unavailable, recovers)"},
		row{attack: "SIGKILL mid-command", size: "—", latency: "—", rss: "—", fds: "—",
			result: "not measured: needs a sandboxed command and a restart check, not built yet"})

	var b strings.Builder
	b.WriteString("| attack | size | honest p50 / p99 | peak RSS | descriptors | result |\n|---|---|---|---|---|---|\n")
	var failed []string
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.attack, r.size, r.latency, r.rss, r.fds, r.result)
		if r.failed {
			failed = append(failed, r.attack)
		}
	}
	if len(failed) > 0 {
		return b.String(), fmt.Errorf("abuse: bounds failed: %s", strings.Join(failed, ", "))
	}
	return b.String(), nil
}

// measureAttack runs one attack while an honest client polls /healthz and a
// sampler watches the server's memory and descriptors.
func measureAttack(s *liveserver.Server, attack, size string, p99Bound time.Duration, f func() (string, bool)) row {
	pid := s.PID()
	baseRSS := rss(pid)
	limit := fdLimit(pid)
	var peakRSS, peakFDs atomic.Int64
	peakRSS.Store(baseRSS)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if v := rss(pid); v > peakRSS.Load() {
				peakRSS.Store(v)
			}
			if v := fdCount(pid); v > peakFDs.Load() {
				peakFDs.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var lat []time.Duration
	go func() {
		defer wg.Done()
		lat = honestClient(s.Base, stop)
	}()
	detail, ok := f()
	close(stop)
	wg.Wait()

	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	r := row{attack: attack, size: size,
		latency: fmt.Sprintf("%s / %s (%d polls)", ms(p50), ms(p99), len(lat)),
		rss:     fmt.Sprintf("%d MiB (+%d)", peakRSS.Load()>>20, (peakRSS.Load()-baseRSS)>>20),
		fds:     fmt.Sprintf("%d of %d", peakFDs.Load(), limit)}
	var why []string
	if !ok {
		why = append(why, detail)
	}
	if len(lat) == 0 || p99 > p99Bound {
		why = append(why, fmt.Sprintf("healthz p99 over %s", p99Bound))
	}
	if peakRSS.Load()-baseRSS > rssGrowthMax {
		why = append(why, "RSS grew over 512 MiB")
	}
	if limit > 0 && peakFDs.Load() >= limit {
		why = append(why, "descriptors at the limit")
	}
	if len(why) > 0 {
		r.failed, r.result = true, "fail: "+strings.Join(why, "; ")
	} else {
		r.result = "pass: " + detail
	}
	return r
}

// honestClient polls /healthz every 20 ms until stop, from 127.0.0.1 over
// one kept-alive connection; a poll that fails counts as its full timeout.
func honestClient(base string, stop <-chan struct{}) []time.Duration {
	const timeout = 5 * time.Second
	hc := &http.Client{Timeout: timeout}
	var lat []time.Duration
	for {
		select {
		case <-stop:
			return lat
		default:
		}
		start := time.Now()
		resp, err := hc.Get(base + "/healthz")
		d := time.Since(start)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				d = timeout
			}
		} else {
			d = timeout
		}
		lat = append(lat, d)
		time.Sleep(20 * time.Millisecond)
	}
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// rss is the process's resident memory in bytes, 0 when unreadable.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func fdCount(pid int) int64 {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return int64(len(ents))
}

// fdLimit is the process's soft descriptor limit, 0 when unknown.
func fdLimit(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(strings.TrimPrefix(line, "Max open files"))
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// attackerDialer dials from a loopback source of its own, a hundred
// connections per source, so the attack is not cut by the per-address
// bound alone and the honest client on 127.0.0.1 keeps its own.
func attackerDialer(i int) *net.Dialer {
	g := i / 100
	src := net.IPv4(127, 10, byte(g/250), byte(g%250+1))
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
}

// slowBodies opens n connections that each promise a body and send one byte
// of it every two seconds.
func slowBodies(addr string, n int, dur time.Duration) (string, bool) {
	var opened, cut atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(dur)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			conn, err := attackerDialer(i).Dial("tcp", addr)
			if err != nil {
				return
			}
			defer conn.Close()
			opened.Add(1)
			_, err = fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n", addr)
			for err == nil && time.Now().Before(deadline) {
				time.Sleep(2 * time.Second)
				_, err = conn.Write([]byte("a"))
			}
			if err != nil {
				cut.Add(1)
			}
		}(i)
	}
	wg.Wait()
	return fmt.Sprintf("%d opened, %d cut by the server", opened.Load(), cut.Load()), true
}

// wrongPasswords sends n sign-ins at once with wrong passwords for one
// existing account; the throttle must answer some of them 429.
func wrongPasswords(base string, n int) (string, bool) {
	var throttled, other atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := attackerDialer(i)
			hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
			token := strings.Repeat("c", 40)
			form := url.Values{"username": {victimName}, "password": {fmt.Sprintf("wrong-%d", i)}}
			req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-CSRF-Token", token)
			req.AddCookie(&http.Cookie{Name: "atelier_csrf", Value: token})
			resp, err := hc.Do(req)
			if err != nil {
				other.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				throttled.Add(1)
			} else if resp.StatusCode >= 500 {
				other.Add(1)
			}
		}(i)
	}
	wg.Wait()
	detail := fmt.Sprintf("%d of %d answered 429, %d errors", throttled.Load(), n, other.Load())
	return detail, throttled.Load() > 0 && other.Load() == 0
}

// streamFlood opens n event streams as one account and holds them; at most
// streamCap may be answered 200.
func streamFlood(addr string, c *liveserver.Client, n int) (string, bool) {
	var ok, refused, failed atomic.Int64
	var firstErr atomic.Value
	fail := func(why string) {
		failed.Add(1)
		firstErr.CompareAndSwap(nil, why)
	}
	var wg sync.WaitGroup
	hold := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			conn, err := attackerDialer(i).Dial("tcp", addr)
			if err != nil {
				fail(err.Error())
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(conn, "GET /admin/events HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nCookie: %s\r\n\r\n", addr, c.CookieHeader())
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			switch {
			case err != nil:
				fail(err.Error())
				return
			case resp.StatusCode == http.StatusOK:
				ok.Add(1)
			case resp.StatusCode == http.StatusTooManyRequests:
				refused.Add(1)
			default:
				fail(resp.Status)
			}
			<-hold
		}(i)
	}
	go func() {
		// Hold the streams open a while after the last answer, then let go.
		for ok.Load()+refused.Load()+failed.Load() < int64(n) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		close(hold)
	}()
	wg.Wait()
	detail := fmt.Sprintf("%d open, %d answered 429, %d failed", ok.Load(), refused.Load(), failed.Load())
	if why := firstErr.Load(); why != nil {
		detail += fmt.Sprintf(" (first: %v)", why)
	}
	good := ok.Load() <= streamCap && (n <= streamCap || refused.Load() > 0)
	return detail, good
}

// largeDownload imports one large file and downloads it from several
// clients at once, checking every byte count.
func largeDownload(c *liveserver.Client, size int64, n int) (string, bool) {
	id, err := c.CreateProject("abuse-download")
	if err != nil {
		return err.Error(), false
	}
	if err := importFile(c, id, "big.bin", size); err != nil {
		return err.Error(), false
	}
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.HC.Get(fmt.Sprintf("%s/projects/%d/code/raw?path=big.bin", c.Base, id))
			if err != nil {
				wrong.Add(1)
				return
			}
			defer resp.Body.Close()
			got, _ := io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK || got != size {
				wrong.Add(1)
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d of %d downloads complete", int64(n)-wrong.Load(), n), wrong.Load() == 0
}

// importFile uploads a zip holding one file of size zero bytes; it
// compresses to almost nothing, so the upload is quick and the file large.
func importFile(c *liveserver.Client, id int64, name string, size int64) error {
	var archive bytes.Buffer
	zw := zip.NewWriter(&archive)
	w, err := zw.Create(name)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(w, zeros{}, size); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return c.Import(id, "big.zip", archive.Bytes())
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
