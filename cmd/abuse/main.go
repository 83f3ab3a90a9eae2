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

	"atelier/internal/tied"
	"atelier/pgembed"
	"atelier/testrig/liveserver"
	"atelier/testrig/miniotest"
)

func main() {
	short := flag.Bool("short", false, "small sizes for CI (a few minutes)")
	only := flag.String("run", "", "run only the attacks whose name matches this regular expression")
	behind := flag.Bool("balancer", false, "attack two instances behind HAProxy instead of one server")
	flag.Parse()
	pick, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "abuse: -run:", err)
		os.Exit(2)
	}
	table, err := run(*short, *behind, pick, os.Stderr)
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
	stalled       int // stalled readers of a project's events
	stalledCycles int // edit sessions opened and discarded meanwhile, two events each
	downloadBytes int64
	downloads     int
	largeFiles    int
	largeFileSize int64
	manyFiles     int
	captureLarge  int           // files of 256 KiB a command writes
	captureDepth  int           // folders deep
	captureSmall  int           // files of one byte
	uploads       int           // anonymous unterminated uploads at once
	uploadBytes   int64         // each one's file part
	bombZerosMiB  int           // what the zip of zeros unpacks to
	bombEntries   int           // empty entries of the other zip
	reclaimFiles  int           // files of each of the two imports a deleted project had
	reclaimSize   int64         // their size
	outage        time.Duration // how long PostgreSQL and MinIO stay down
	p99Bound      time.Duration
	// collectGrace is the server's ATELIER_COLLECT_GRACE_MS: longer than
	// the largest import's publish takes, short enough to wait out.
	collectGrace time.Duration
}

func sizesFor(short bool) sizes {
	if short {
		return sizes{slowConns: 200, slowFor: 10 * time.Second, wrongLogins: 100, streams: 100,
			stalled: 8, stalledCycles: 300, downloadBytes: 64 << 20, downloads: 10, largeFiles: 3, largeFileSize: 64 << 20, manyFiles: 2000,
			captureLarge: 1000, captureDepth: 3000, captureSmall: 20000,
			uploads: 3, uploadBytes: 100 << 20, bombZerosMiB: 4100, bombEntries: 1_200_000,
			reclaimFiles: 4, reclaimSize: 16 << 20, collectGrace: 30 * time.Second,
			outage: 3 * time.Second, p99Bound: time.Second}
	}
	return sizes{slowConns: 20000, slowFor: 40 * time.Second, wrongLogins: 300, streams: 20000,
		stalled: streamCap, stalledCycles: 2000, downloadBytes: 200 << 20, downloads: 10, largeFiles: 7, largeFileSize: 250 << 20, manyFiles: 20000,
		captureLarge: 4000, captureDepth: 20000, captureSmall: 100000,
		uploads: 100, uploadBytes: 100 << 20, bombZerosMiB: 8192, bombEntries: 1_200_000,
		reclaimFiles: 8, reclaimSize: 64 << 20, collectGrace: 5 * time.Minute,
		outage: 15 * time.Second, p99Bound: 100 * time.Millisecond}
}

const (
	adminPassword = "abuse-admin-password-1"
	victimName    = "victim"
	victimPass    = "victim-password-123"
	rssMax        = 512 << 20 // the server's resident memory, at any moment of a case that bounds it
	streamCap     = 64
)

// row is one line of the printed table.
type row struct {
	attack, size, latency, rss, fds, result string
	failed                                  bool
}

// run builds and starts the server, runs every attack and returns the table;
// the error says which bounds failed. behind: the server has a second
// instance beside it and HAProxy in front of both, and every attack and
// the honest client go through the balancer.
func run(short, behind bool, pick *regexp.Regexp, logw io.Writer) (string, error) {
	sz := sizesFor(short)
	env := []string{"ATELIER_COLLECT_GRACE_MS=" + strconv.FormatInt(sz.collectGrace.Milliseconds(), 10)}
	if behind {
		// The balancer's X-Forwarded-For names each client; it bounds
		// their connections itself.
		env = append(env, "ATELIER_TRUSTED_PROXIES=127.0.0.1/32")
	}
	srv, err := startServer(logw, env...)
	if err != nil {
		return "", err
	}
	defer srv.stop()
	if behind {
		if srv.peer, srv.lb, err = srv.addPeer(); err != nil {
			return "", err
		}
	}
	addr, base := srv.front()

	c, err := signIn(base, "admin", adminPassword)
	if err != nil {
		return "", err
	}
	if err := c.Post("/admin/users", url.Values{"username": {victimName}, "password": {victimPass}}); err != nil {
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
			if err := srv.restartAll(); err != nil {
				rows = append(rows, row{attack: attack, size: size, failed: true, result: "fail: " + err.Error()})
				return
			}
		}
		rows = append(rows, srv.measure(attack, size, sz.p99Bound, fault, memoryBound, f))
	}
	measure("slow bodies", fmt.Sprintf("%d conns, 1 byte / 2 s, %s", sz.slowConns, sz.slowFor), false, false,
		func() (string, bool) { return slowBodies(addr, sz.slowConns, sz.slowFor) })
	measure("concurrent wrong passwords", fmt.Sprintf("%d parallel", sz.wrongLogins), false, true,
		func() (string, bool) { return wrongPasswords(base, sz.wrongLogins) })
	measure("sign-in lockout attempt", fmt.Sprintf("1 address besieging, %d guessing, %s", lockoutAddrs, sz.slowFor), false, true,
		func() (string, bool) { return signInLockout(base, sz.slowFor) })
	measure("stream flood (/admin/events)", fmt.Sprintf("%d streams, one account", sz.streams), false, false,
		func() (string, bool) { return streamFlood(addr, c, sz.streams) })
	measure("stalled readers (/projects/{id}/events)", fmt.Sprintf("%d readers that never read, %d events", sz.stalled, 2*sz.stalledCycles), false, true,
		func() (string, bool) { return stalledReaders(addr, srv.lb != nil, c, sz.stalled, sz.stalledCycles) })
	measure("large download (/code/raw)", fmt.Sprintf("%d MiB file, %d at once", sz.downloadBytes>>20, sz.downloads), false, true,
		func() (string, bool) { return largeDownload(c, sz.downloadBytes, sz.downloads) })
	measure("large import (large files)", fmt.Sprintf("%d files of %d MiB", sz.largeFiles, sz.largeFileSize>>20), false, true,
		func() (string, bool) { return largeImport(c, sz.largeFiles, sz.largeFileSize) })
	measure("large import (many files)", fmt.Sprintf("%d files", sz.manyFiles), false, true,
		func() (string, bool) { return manyFilesImport(c, sz.manyFiles) })
	measure("capture (large files)", fmt.Sprintf("%d files of 256 KiB", sz.captureLarge), false, true,
		func() (string, bool) {
			return captureAttack(srv, c, "capture-large", captureLargeFiles(sz.captureLarge), !short)
		})
	measure("capture (deep tree)", fmt.Sprintf("%d folders deep", sz.captureDepth), false, true,
		func() (string, bool) {
			return captureAttack(srv, c, "capture-deep", captureDeepTree(sz.captureDepth), !short)
		})
	measure("capture (many files)", fmt.Sprintf("%d files of 1 byte", sz.captureSmall), false, true,
		func() (string, bool) {
			return captureAttack(srv, c, "capture-many", captureManyFiles(sz.captureSmall), !short)
		})
	measure("anonymous unterminated upload", fmt.Sprintf("%d conns, %d MiB part each, no closing boundary", sz.uploads, sz.uploadBytes>>20), false, true,
		func() (string, bool) { return unterminatedUploads(srv, sz.uploads, sz.uploadBytes) })
	measure("zip bomb", fmt.Sprintf("%d GiB of zeros; %d empty entries", sz.bombZerosMiB>>10, sz.bombEntries), false, true,
		func() (string, bool) { return archiveBombs(srv, c, sz.bombZerosMiB, sz.bombEntries) })
	measure("storage reclaimed", fmt.Sprintf("2 imports of %d files of %d MiB, delete, collect (grace %s)",
		sz.reclaimFiles, sz.reclaimSize>>20, sz.collectGrace), false, true,
		func() (string, bool) {
			return storageReclaimed(srv, c, sz.reclaimFiles, sz.reclaimSize, sz.collectGrace)
		})
	measure("PostgreSQL restart", fmt.Sprintf("down %s under saves and reads", sz.outage), true, true,
		func() (string, bool) { return databaseRestart(srv, c, sz.outage) })
	measure("MinIO stop", fmt.Sprintf("down %s under Code page reads and an import", sz.outage), true, true,
		func() (string, bool) { return objectStoreStop(srv, c, sz.outage) })
	measure("SIGKILL mid-command and shell", "one command, one shell, restart", true, true,
		func() (string, bool) { return serverKill(srv, c) })
	measure("SIGKILL mid-verification", "a Change's check running, restart", true, true,
		func() (string, bool) { return verifyKill(srv, c) })
	measure(clusterRow, "2 instances behind HAProxy, round-robin; the session's holder SIGKILLed", true, false,
		func() (string, bool) {
			return clusterKill(srv, func(line string) { fmt.Fprintln(logw, "abuse: "+line) })
		})
	if pick.MatchString(embeddedRow) {
		fmt.Fprintf(logw, "abuse: %s\n", embeddedRow)
		rows = append(rows, measureEmbedded(srv, sz.p99Bound))
	}

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
	dir     string
	dataDir string // ATELIER_DATA
	tmp     string // the server's TMPDIR
	addr    string
	base    string
	bin     string
	env     []string
	logw    io.Writer // the server's output, kept in server.log

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
	pid    atomic.Int64  // of the running process, for the samplers

	pgConfig pgembed.Config
	pg       *pgembed.Cluster
	minio    *miniotest.Server

	// A second instance on the same database, store and data folder,
	// and HAProxy in front of both (addPeer), or nil.
	peer *server
	lb   *balancer
}

// front is where clients reach the service: the balancer when there is
// one, else the server itself.
func (s *server) front() (addr, base string) {
	if s.lb != nil {
		return s.lb.addr, s.lb.base
	}
	return s.addr, s.base
}

// instances are the server and the second instance beside it, if any.
func (s *server) instances() []*server {
	if s.peer != nil {
		return []*server{s, s.peer}
	}
	return []*server{s}
}

// pids are the running processes of the instances.
func (s *server) pids() []int {
	var pids []int
	for _, in := range s.instances() {
		pids = append(pids, int(in.pid.Load()))
	}
	return pids
}

// killAll kills every instance with SIGKILL, as a power cut would.
func (s *server) killAll() {
	for _, in := range s.instances() {
		in.kill()
	}
}

// launchAll starts every instance again and waits until the balancer, if
// any, counts them up.
func (s *server) launchAll() error {
	for _, in := range s.instances() {
		if err := in.launch(); err != nil {
			return err
		}
	}
	if s.lb != nil {
		return s.lb.waitUp(30 * time.Second)
	}
	return nil
}

// startServer starts the server with env added to its environment.
func startServer(logw io.Writer, env ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "atelier-abuse-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir}
	if err := s.prepare(logw); err != nil {
		s.stop()
		return nil, err
	}
	s.env = append(s.env, env...)
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
	s.dataDir, s.tmp = data, filepath.Join(s.dir, "tmp")
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
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
		"ATELIER_IMPORT_MAX_BYTES="+strconv.Itoa(300<<20),
		// The full run's large import unpacks to 1.75 GiB.
		"ATELIER_IMPORT_MAX_EXPANDED_BYTES="+strconv.Itoa(2<<30), "TMPDIR="+s.tmp,
		// One account opens a session in each row's project.
		"ATELIER_MAX_SESSIONS_PER_USER=1000",
		// Where a second instance hands it requests (clusterKill).
		"ATELIER_INTERNAL_URL="+s.base, "ATELIER_CLUSTER_SECRET="+clusterSecret)
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

// restartAll stops every instance as an operator does (SIGTERM) and
// starts them again.
func (s *server) restartAll() error {
	var wg sync.WaitGroup
	for _, in := range s.instances() {
		wg.Go(in.terminate)
	}
	wg.Wait()
	return s.launchAll()
}

// terminate ends the server with SIGTERM so it finishes its requests, or
// with SIGKILL when it has not exited 30 s later.
func (s *server) terminate() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.kill()
	}
}

// keepLog copies each instance's log out of the folder stop removes and
// says where they went.
func (s *server) keepLog() string {
	var kept []string
	for _, in := range s.instances() {
		b, err := os.ReadFile(filepath.Join(in.dir, "server.log"))
		if err != nil {
			kept = append(kept, err.Error())
			continue
		}
		path := in.dir + ".log"
		if err := os.WriteFile(path, b, 0o600); err != nil {
			kept = append(kept, err.Error())
			continue
		}
		kept = append(kept, path)
	}
	return strings.Join(kept, ", ")
}

// kill ends the server with SIGKILL, as a crash or the OOM killer would,
// and waits until it is gone.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// stop ends the server (and the instance beside it) with SIGTERM so it
// finishes its requests, then PostgreSQL and MinIO, and removes the
// suite's folder.
func (s *server) stop() {
	s.dropPeer()
	s.terminate()
	if s.pg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.pg.Stop(ctx)
		cancel()
	}
	if s.minio != nil {
		_ = s.minio.Stop()
	}
	_ = liveserver.RemoveData(s.dir)
}

// measure runs one attack while an honest client polls /healthz and a
// sampler watches the server's memory and descriptors (each instance's,
// behind a balancer: the figures are the largest of them). memoryBound
// holds the server's RSS under rssMax; issue 12 sets that target for the
// password flood, the downloads and the imports, and the suite for the
// faults. A connection flood's memory follows the connection bound
// instead (each held connection costs some tens of KiB), so it is shown
// but not bound. In a fault (the
// database or the server itself away) the honest client's polls may be
// refused or answered 503 (or 502 by a balancer whose instance died
// under the poll), but each must be answered within the bound: a hung
// poll counts as its full timeout.
func (s *server) measure(attack, size string, p99Bound time.Duration, fault, memoryBound bool, f func() (string, bool)) row {
	var baseRSS, limit int64
	for _, pid := range s.pids() {
		baseRSS = max(baseRSS, rss(pid))
		if l := fdLimit(pid); limit == 0 || (l > 0 && l < limit) {
			limit = l
		}
	}
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
			for _, pid := range s.pids() {
				if v := rss(pid); v > peakRSS.Load() {
					peakRSS.Store(v)
				}
				if v := fdCount(pid); v > peakFDs.Load() {
					peakFDs.Store(v)
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var polls []poll
	_, front := s.front()
	go func() {
		defer wg.Done()
		polls = honestClient(front, stop)
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
		case fault && s.lb != nil && p.status == http.StatusBadGateway:
			// The balancer's answer for a request whose instance died
			// under it: a refusal, passed on.
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
			resp, err := wrongPassword(hc, base, i)
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

// wrongPassword signs in as the victim with the i-th wrong password, with
// a CSRF pair of its own as a browser would send it.
func wrongPassword(hc *http.Client, base string, i int) (*http.Response, error) {
	token := strings.Repeat("c", 40)
	form := url.Values{"username": {victimName}, "password": {fmt.Sprintf("wrong-%d", i)}}
	req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", token)
	req.AddCookie(&http.Cookie{Name: "atelier_csrf", Value: token})
	return hc.Do(req)
}

// lockoutAddrs is how many addresses the lockout attempt's guesser with
// many addresses has.
const lockoutAddrs = 50

// signInLockout tries to lock the victim out of their account. For dur one
// address sends a wrong password as soon as each of its waits ends; then
// lockoutAddrs others send one wrong password each, and then another. All
// along the victim signs in with the right password from an address of
// their own every 250 ms. Every sign-in of the victim must succeed; the
// besieging address must be made to wait, and so must every second try of
// the others.
func signInLockout(base string, dur time.Duration) (string, bool) {
	var checked, throttled, secondsRefused, victimIn, victimOut, other atomic.Int64
	var firstErr atomic.Value
	fail := func(why string) {
		other.Add(1)
		firstErr.CompareAndSwap(nil, why)
	}
	// guess sends a wrong password from hc and says what came back.
	guess := func(hc *http.Client, i int) (status int, wait time.Duration) {
		resp, err := wrongPassword(hc, base, i)
		if err != nil {
			fail(err.Error())
			return 0, 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return resp.StatusCode, time.Duration(secs) * time.Second
	}
	from := func(i int) *http.Client {
		d := attackerDialer(i)
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	}
	victimSignsIn := func() {
		if _, err := signIn(base, victimName, victimPass); err != nil {
			victimOut.Add(1)
			firstErr.CompareAndSwap(nil, "the victim: "+err.Error())
			return
		}
		victimIn.Add(1)
	}
	stop := make(chan struct{})
	victimDone := make(chan struct{})
	go func() {
		defer close(victimDone)
		for {
			victimSignsIn()
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()

	deadline := time.Now().Add(dur)
	besieger := from(0)
	for i := 0; time.Now().Before(deadline); i++ {
		status, wait := guess(besieger, i)
		if status == http.StatusUnauthorized {
			checked.Add(1)
			continue
		}
		if status != http.StatusTooManyRequests {
			fail(fmt.Sprintf("the besieging address got %d", status))
			break
		}
		throttled.Add(1)
		time.Sleep(min(wait, time.Until(deadline)))
	}

	var wg sync.WaitGroup
	clients := make([]*http.Client, lockoutAddrs)
	for k := range clients {
		clients[k] = from(100 * (k + 1)) // an address of its own
		wg.Go(func() {
			if status, _ := guess(clients[k], 0); status != http.StatusUnauthorized {
				fail(fmt.Sprintf("a first try got %d, want 401", status))
			}
		})
	}
	wg.Wait()
	for _, hc := range clients {
		wg.Go(func() {
			if status, _ := guess(hc, 1); status == http.StatusTooManyRequests {
				secondsRefused.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-victimDone
	victimSignsIn()

	detail := fmt.Sprintf("the victim signed in %d of %d times; the besieging address had %d wrong passwords checked, %d answered 429; %d of %d second tries from other addresses answered 429",
		victimIn.Load(), victimIn.Load()+victimOut.Load(), checked.Load(), throttled.Load(), secondsRefused.Load(), lockoutAddrs)
	if e := firstErr.Load(); e != nil {
		detail += fmt.Sprintf(" (first failure: %s)", e)
	}
	ok := victimOut.Load() == 0 && victimIn.Load() > 0 && throttled.Load() > 0 &&
		secondsRefused.Load() == lockoutAddrs && other.Load() == 0
	return detail, ok
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
