// Command abuse starts a real Atelier server, with a PostgreSQL and a MinIO
// of its own, and attacks it from 127.0.0.1 while an honest client polls
// /healthz, then takes away what it stands on: PostgreSQL, MinIO, and the
// server itself by SIGKILL. It prints what held: the honest client's
// latency, the server's peak memory and descriptors, and whether each
// bound was kept. It exits non-zero when one was not.
//
//	go run ./cmd/abuse -short   # the CI run, a few minutes
//	go run ./cmd/abuse          # the full sizes of issue 12
//	go run ./cmd/abuse -short -run 'MinIO|SIGKILL'   # some rows only
package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"atelier/internal/liveserver"
	"atelier/internal/tied"
	"atelier/pgembed"
	"atelier/storage/miniotest"
)

func main() {
	short := flag.Bool("short", false, "small sizes for CI (a few minutes)")
	only := flag.String("run", "", "run only the attacks whose name matches this regular expression")
	flag.Parse()
	pick, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "abuse: -run:", err)
		os.Exit(2)
	}
	table, err := run(*short, pick, os.Stderr)
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
	largeFiles    int
	largeFileSize int64
	manyFiles     int
	outage        time.Duration // how long PostgreSQL and MinIO stay down
	p99Bound      time.Duration
}

func sizesFor(short bool) sizes {
	if short {
		return sizes{slowConns: 200, slowFor: 10 * time.Second, wrongLogins: 100, streams: 100,
			downloadBytes: 64 << 20, downloads: 10, largeFiles: 3, largeFileSize: 64 << 20, manyFiles: 2000,
			outage: 3 * time.Second, p99Bound: time.Second}
	}
	return sizes{slowConns: 20000, slowFor: 40 * time.Second, wrongLogins: 300, streams: 20000,
		downloadBytes: 200 << 20, downloads: 10, largeFiles: 7, largeFileSize: 250 << 20, manyFiles: 20000,
		outage: 15 * time.Second, p99Bound: 100 * time.Millisecond}
}

const (
	adminPassword = "abuse-admin-password-1"
	victimName    = "victim"
	rssMax        = 512 << 20 // the server's resident memory, at any moment of a case that bounds it
	streamCap     = 64
)

// row is one line of the printed table.
type row struct {
	attack, size, latency, rss, fds, result string
	failed                                  bool
}

// run builds and starts the server, runs every attack and returns the table;
// the error says which bounds failed.
func run(short bool, pick *regexp.Regexp, logw io.Writer) (string, error) {
	sz := sizesFor(short)
	srv, err := startServer(logw)
	if err != nil {
		return "", err
	}
	defer srv.stop()

	c, err := signIn(srv.base, "admin", adminPassword)
	if err != nil {
		return "", err
	}
	if err := c.Post("/admin/users", url.Values{"username": {victimName}, "password": {"victim-password-123"}}); err != nil {
		return "", fmt.Errorf("abuse: create victim: %w", err)
	}

	var rows []row
	measure := func(attack, size string, fault, memoryBound bool, f func() (string, bool)) {
		if !pick.MatchString(attack) {
			return
		}
		fmt.Fprintf(logw, "abuse: %s (%s)\n", attack, size)
		// Each case meets a fresh process: the Go runtime keeps memory an
		// earlier attack made it take, which would count against the next.
		if len(rows) > 0 {
			if err := srv.restart(); err != nil {
				rows = append(rows, row{attack: attack, size: size, failed: true, result: "fail: " + err.Error()})
				return
			}
		}
		rows = append(rows, srv.measure(attack, size, sz.p99Bound, fault, memoryBound, f))
	}
	measure("slow bodies", fmt.Sprintf("%d conns, 1 byte / 2 s, %s", sz.slowConns, sz.slowFor), false, false,
		func() (string, bool) { return slowBodies(srv.addr, sz.slowConns, sz.slowFor) })
	measure("concurrent wrong passwords", fmt.Sprintf("%d parallel", sz.wrongLogins), false, true,
		func() (string, bool) { return wrongPasswords(srv.base, sz.wrongLogins) })
	measure("stream flood (/admin/events)", fmt.Sprintf("%d streams, one account", sz.streams), false, false,
		func() (string, bool) { return streamFlood(srv.addr, c, sz.streams) })
	measure("large download (/code/raw)", fmt.Sprintf("%d MiB file, %d at once", sz.downloadBytes>>20, sz.downloads), false, true,
		func() (string, bool) { return largeDownload(c, sz.downloadBytes, sz.downloads) })
	measure("large import (large files)", fmt.Sprintf("%d files of %d MiB", sz.largeFiles, sz.largeFileSize>>20), false, true,
		func() (string, bool) { return largeImport(c, sz.largeFiles, sz.largeFileSize) })
	measure("large import (many files)", fmt.Sprintf("%d files", sz.manyFiles), false, true,
		func() (string, bool) { return manyFilesImport(c, sz.manyFiles) })
	measure("PostgreSQL restart", fmt.Sprintf("down %s under saves and reads", sz.outage), true, true,
		func() (string, bool) { return databaseRestart(srv, c, sz.outage) })
	measure("MinIO stop", fmt.Sprintf("down %s under Code page reads and an import", sz.outage), true, true,
		func() (string, bool) { return objectStoreStop(srv, c, sz.outage) })
	measure("SIGKILL mid-command and shell", "one command, one shell, restart", true, true,
		func() (string, bool) { return serverKill(srv, c) })
	measure("SIGKILL mid-verification", "a Change's check running, restart", true, true,
		func() (string, bool) { return verifyKill(srv, c) })

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
		return b.String(), fmt.Errorf("abuse: bounds failed: %s (the server's log: %s)", strings.Join(failed, ", "), srv.keepLog())
	}
	return b.String(), nil
}

// server is the child process under attack, with the PostgreSQL and the
// MinIO it stands on. The suite runs those itself, so it can stop and start
// them under the server as an operator (or a crash) would.
type server struct {
	dir  string
	addr string
	base string
	bin  string
	env  []string
	logw io.Writer // the server's output, kept in server.log

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
	pid    atomic.Int64  // of the running process, for the samplers

	pgConfig pgembed.Config
	pg       *pgembed.Cluster
	minio    *miniotest.Server
}

func startServer(logw io.Writer) (*server, error) {
	dir, err := os.MkdirTemp("", "atelier-abuse-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir}
	if err := s.prepare(logw); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.launch(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// prepare starts PostgreSQL and MinIO and builds the server.
func (s *server) prepare(logw io.Writer) error {
	// PostgreSQL runs as the postgres account, which must pass through
	// every parent of its folder.
	if err := os.Chmod(s.dir, 0o711); err != nil {
		return err
	}
	s.pgConfig = pgembed.Config{Dir: filepath.Join(s.dir, "pg"), NoSync: true, DieWithParent: true}
	var err error
	if s.pg, err = pgembed.Start(context.Background(), s.pgConfig); err != nil {
		return fmt.Errorf("abuse: start PostgreSQL: %w", err)
	}
	if s.minio, err = miniotest.Launch(filepath.Join(s.dir, "minio")); err != nil {
		return fmt.Errorf("abuse: start MinIO: %w", err)
	}
	s.bin = filepath.Join(s.dir, "atelier")
	build := exec.Command("go", "build", "-o", s.bin, "atelier")
	build.Stdout, build.Stderr = logw, logw
	if err := build.Run(); err != nil {
		return fmt.Errorf("abuse: build server: %w", err)
	}
	data := filepath.Join(s.dir, "data")
	if err := os.Mkdir(data, 0o711); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.addr = l.Addr().String()
	l.Close()
	s.base = "http://" + s.addr
	if s.logw, err = os.Create(filepath.Join(s.dir, "server.log")); err != nil {
		return err
	}
	s.env = append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+s.addr,
		"DATABASE_URL="+s.pg.DSN("atelier"),
		"ATELIER_S3_ENDPOINT="+s.minio.Endpoint, "ATELIER_S3_BUCKET="+bucket,
		"ATELIER_S3_ACCESS_KEY="+s.minio.AccessKey, "ATELIER_S3_SECRET_KEY="+s.minio.SecretKey,
		"ATELIER_ADMIN_PASSWORD="+adminPassword, "ATELIER_SANDBOX_DISK_BYTES=0",
		"ATELIER_IMPORT_MAX_BYTES="+strconv.Itoa(300<<20))
	return nil
}

const bucket = "atelier"

// launch starts the server process and waits until /healthz answers 200.
func (s *server) launch() error {
	cmd := exec.Command(s.bin)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s.logw, s.logw
	// The server dies with the suite, even when the suite is killed.
	exited := make(chan struct{})
	if err := tied.Start(cmd, syscall.SIGKILL, func(error) { close(exited) }); err != nil {
		return err
	}
	s.cmd, s.exited = cmd, exited
	s.pid.Store(int64(cmd.Process.Pid))
	deadline := time.Now().Add(3 * time.Minute)
	hc := &http.Client{Timeout: 5 * time.Second}
	for time.Now().Before(deadline) {
		resp, err := hc.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("abuse: the server exited while starting (log in %s)", filepath.Join(s.dir, "server.log"))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("abuse: server did not answer /healthz within 3 minutes (log in %s)", filepath.Join(s.dir, "server.log"))
}

// restart stops the server as an operator does (SIGTERM) and starts it
// again.
func (s *server) restart() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.kill()
	}
	return s.launch()
}

// keepLog copies the server's log out of the folder stop removes and
// returns where it went.
func (s *server) keepLog() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if err != nil {
		return err.Error()
	}
	path := s.dir + ".log"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err.Error()
	}
	return path
}

// kill ends the server with SIGKILL, as a crash or the OOM killer would,
// and waits until it is gone.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// stop ends the server with SIGTERM so it finishes its requests, then
// PostgreSQL and MinIO, and removes the suite's folder.
func (s *server) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.kill()
		}
	}
	if s.pg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.pg.Stop(ctx)
		cancel()
	}
	if s.minio != nil {
		_ = s.minio.Stop()
	}
	_ = os.RemoveAll(s.dir)
}

// measure runs one attack while an honest client polls /healthz and a
// sampler watches the server's memory and descriptors. memoryBound holds
// the server's RSS under rssMax; issue 12 sets that target for the
// password flood, the downloads and the imports, and the suite for the
// faults. A connection flood's memory follows the connection bound
// instead (each held connection costs some tens of KiB), so it is shown
// but not bound. In a fault (the
// database or the server itself away) the honest client's polls may be
// refused or answered 503, but each must be answered within the bound: a
// hung poll counts as its full timeout.
func (s *server) measure(attack, size string, p99Bound time.Duration, fault, memoryBound bool, f func() (string, bool)) row {
	baseRSS := rss(int(s.pid.Load()))
	limit := fdLimit(int(s.pid.Load()))
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
			pid := int(s.pid.Load())
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
	var polls []poll
	go func() {
		defer wg.Done()
		polls = honestClient(s.base, stop)
	}()
	detail, ok := f()
	close(stop)
	wg.Wait()

	lat := make([]time.Duration, len(polls))
	down := 0
	wrong := map[string]int{} // what the failed polls got
	for i, p := range polls {
		lat[i] = p.took
		switch {
		case p.status == http.StatusOK:
		case fault && (p.status == http.StatusServiceUnavailable || p.refused):
			down++
		default:
			lat[i] = pollTimeout
			switch {
			case p.status != 0:
				wrong[strconv.Itoa(p.status)]++
			case p.refused:
				wrong["refused"]++
			default:
				wrong["hung"]++
			}
		}
	}
	p50, p99 := liveserver.Percentile(lat, 50), liveserver.Percentile(lat, 99)
	r := row{attack: attack, size: size,
		latency: fmt.Sprintf("%s / %s (%d polls)", ms(p50), ms(p99), len(lat)),
		rss:     fmt.Sprintf("%d MiB (+%d)", peakRSS.Load()>>20, (peakRSS.Load()-baseRSS)>>20),
		fds:     fmt.Sprintf("%d of %d", peakFDs.Load(), limit)}
	if down > 0 {
		r.latency += fmt.Sprintf(", %d refused or 503", down)
	}
	var why []string
	if !ok {
		why = append(why, detail)
	}
	if len(lat) == 0 || p99 > p99Bound {
		why = append(why, fmt.Sprintf("healthz p99 over %s", p99Bound))
	}
	if len(wrong) > 0 {
		var kinds []string
		for k, n := range wrong {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(kinds)
		why = append(why, "polls failed: "+strings.Join(kinds, ", "))
	}
	if memoryBound && peakRSS.Load() > rssMax {
		why = append(why, fmt.Sprintf("RSS over %d MiB", rssMax>>20))
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

// poll is one /healthz request of the honest client.
type poll struct {
	took    time.Duration
	status  int  // 0 when there was no answer
	refused bool // the server was not there (killed, restarting)
}

const pollTimeout = 5 * time.Second

// honestClient polls /healthz every 20 ms until stop, from 127.0.0.1 over
// one kept-alive connection.
func honestClient(base string, stop <-chan struct{}) []poll {
	hc := &http.Client{Timeout: pollTimeout}
	var polls []poll
	for {
		select {
		case <-stop:
			return polls
		default:
		}
		start := time.Now()
		resp, err := hc.Get(base + "/healthz")
		p := poll{took: time.Since(start)}
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.status = resp.StatusCode
		} else {
			// Refused, reset or cut short by a server that died: an
			// answer of sorts, and a quick one. A timeout is a hang.
			var ne net.Error
			p.refused = !errors.As(err, &ne) || !ne.Timeout()
		}
		polls = append(polls, p)
		time.Sleep(20 * time.Millisecond)
	}
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
func streamFlood(addr string, c *client, n int) (string, bool) {
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
func largeDownload(c *client, size int64, n int) (string, bool) {
	id, err := c.CreateProject("abuse-download")
	if err != nil {
		return err.Error(), false
	}
	if err := c.importFile(id, "big.bin", size); err != nil {
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

// client is a signed-in browser of one account, with the suite's own
// requests beside the shared ones.
type client struct{ *liveserver.Client }

func signIn(base, name, password string) (*client, error) {
	c, err := liveserver.SignIn(base, name, password)
	if err != nil {
		return nil, err
	}
	return &client{c}, nil
}

// importFile uploads a zip holding one file of size zero bytes; it
// compresses to almost nothing, so the upload is quick and the file large.
func (c *client) importFile(id int64, name string, size int64) error {
	return c.importArchive(id, []archived{{name: name, size: size}})
}

// archived is one file of an uploaded archive: head, then zeros up to
// size. Distinct heads make distinct blobs, which git would otherwise store
// once.
type archived struct {
	name, head string
	size       int64
}

// importArchive uploads a zip of files into project id.
func (c *client) importArchive(id int64, files []archived) error {
	var archive bytes.Buffer
	zw := zip.NewWriter(&archive)
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, f.head); err != nil {
			return err
		}
		if _, err := io.CopyN(w, zeros{}, f.size-int64(len(f.head))); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("archive", "upload.zip")
	if err != nil {
		return err
	}
	if _, err := fw.Write(archive.Bytes()); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, fmt.Sprintf("%s/projects/%d/import", c.Base, id), &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("abuse: import: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
