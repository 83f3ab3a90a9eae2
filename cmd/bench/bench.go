package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/creack/pty"

	wire "atelier/terminal"
	"atelier/testrig/liveserver"
)

type bench struct {
	sz       sizes
	ttydSrc  string
	logw     io.Writer
	srv      *liveserver.Server
	c        *liveserver.Client
	noDisk   *liveserver.Server // the same server with the disk bound off, while commands runs
	tmp      string
	stopTTYD func() // set while ttyd runs
}

// benchLimits are the only settings the bench's servers change: each
// round opens sessions and imports trees of its own, all as one account,
// and the Go build imports a module with its dependencies, so the bounds
// on what one person may hold and import at once must not stop the rounds.
// None of them changes how fast anything runs.
var benchLimits = []string{"ATELIER_IMPORT_MAX_BYTES=" + strconv.Itoa(1<<30), "ATELIER_IMPORTS_PER_HOUR=1000",
	"ATELIER_MAX_SESSIONS_PER_USER=1000"}

// startServer starts a server with the shipped defaults but benchLimits
// and env, and signs in as its admin.
func startServer(logw io.Writer, env ...string) (*liveserver.Server, *liveserver.Client, error) {
	srv, err := liveserver.Start(logw, append(slices.Clone(benchLimits), env...)...)
	if err != nil {
		return nil, nil, err
	}
	c, err := liveserver.SignIn(srv.Base, "admin", liveserver.AdminPassword)
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return srv, c, nil
}

func newBench(sz sizes, ttydSrc string, logw io.Writer) (*bench, error) {
	srv, c, err := startServer(logw)
	if err != nil {
		return nil, err
	}
	b := &bench{sz: sz, ttydSrc: ttydSrc, logw: logw, srv: srv, c: c}
	if b.tmp, err = os.MkdirTemp("", "atelier-bench-"); err != nil {
		srv.Stop()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	if b.stopTTYD != nil {
		b.stopTTYD()
	}
	if b.noDisk != nil {
		b.noDisk.Stop()
	}
	b.srv.Stop()
	os.RemoveAll(b.tmp)
}

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.logw, "bench: "+format+"\n", args...) }

// session makes a project, imports archive into it when given, and opens
// an edit session: the answer is the session's URL.
func (b *bench) session(name string, archive []byte) (string, error) {
	id, err := project(b.c, name, archive)
	if err != nil {
		return "", err
	}
	return openSession(b.c, id)
}

// project makes a project through c and imports archive into it when
// given.
func project(c *liveserver.Client, name string, archive []byte) (int64, error) {
	id, err := c.CreateProject(name)
	if err != nil {
		return 0, err
	}
	if archive != nil {
		if err := c.Import(id, name+".tar.gz", archive); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// openSession opens an edit session of project id through c: the answer
// is the session's URL.
func openSession(c *liveserver.Client, id int64) (string, error) {
	var s struct {
		ID string `json:"id"`
	}
	if err := c.PostJSON(fmt.Sprintf("/projects/%d/sessions", id), nil, &s); err != nil {
		return "", fmt.Errorf("bench: open session: %w", err)
	}
	return fmt.Sprintf("/projects/%d/sessions/%s", id, s.ID), nil
}

// terminalRound is one round's terminal figures: latencies in seconds,
// rates in bytes a second. ttyd's stay zero when it is not measured.
type terminalRound struct {
	atelierP50, atelierP99, atelierRate float64
	rawP50, rawP99, rawRate             float64
	ttydP50, ttydP99, ttydRate          float64
	floorP50, floorP99                  float64 // a one-byte POST to a bare Go server
	handlerMean                         float64 // Atelier's handlers, per keystroke
	// The processor time of the cat on Atelier and on ttyd: each server's
	// and its client's.
	atelierCPU, ttydCPU cpuUse
}

// terminal measures keystrokes and throughput on Atelier, the raw PTY and
// ttyd, the three taking turns within each round so that a busy moment of
// the machine falls on all of them.
func (b *bench) terminal() ([]row, error) {
	at, err := b.atelierTerminal()
	if err != nil {
		return nil, err
	}
	defer at.stop()

	// The file cat prints holds printable lines (base64 text, so the
	// cooked terminal passes every byte). Atelier's shell makes its own in
	// its sandbox; the raw PTY and ttyd read one of the same size here.
	raw := b.sz.catBytes / 4 * 3
	if err := at.send(fmt.Sprintf("head -c %d /dev/urandom | base64 -w 100 > big.txt; printf 'REA%%s.DY\\n' X\n", raw)); err != nil {
		return nil, err
	}
	if err := at.waitFor([]byte("REAX.DY"), 5*time.Minute); err != nil {
		return nil, fmt.Errorf("bench: make the file: %w", err)
	}
	local := filepath.Join(b.tmp, "big.txt")
	if err := writeCatFile(local, raw); err != nil {
		return nil, err
	}

	tt, whyNot := b.ttydTerminal()
	if tt != nil {
		defer tt.stop()
	} else if whyNot == "" {
		return nil, errors.New("bench: ttyd neither opened nor said why not")
	}

	floor, err := startFloor()
	if err != nil {
		return nil, err
	}
	defer floor.stop()

	keys := keyList(b.sz.keys)
	var rounds []terminalRound
	for i := range b.sz.rounds {
		var r terminalRound
		b.logf("round %d of %d: %d keystrokes each on Atelier, the raw PTY and ttyd", i+1, b.sz.rounds, len(keys))
		before, err := b.metrics(inputSeconds, inputRequests)
		if err != nil {
			return nil, err
		}
		lat, err := keystrokes(at, keys)
		if err != nil {
			return nil, fmt.Errorf("bench: atelier: %w", err)
		}
		r.atelierP50, r.atelierP99 = percentiles(lat)
		after, err := b.metrics(inputSeconds, inputRequests)
		if err != nil {
			return nil, err
		}
		if r.handlerMean, _, err = spent(before, after, 0, 1); err != nil {
			return nil, err
		}
		if lat, err = floor.roundTrips(len(keys)); err != nil {
			return nil, err
		}
		r.floorP50, r.floorP99 = percentiles(lat)
		if lat, err = rawKeystrokes(keys); err != nil {
			return nil, err
		}
		r.rawP50, r.rawP99 = percentiles(lat)
		if tt != nil {
			if lat, err = keystrokes(tt, keys); err != nil {
				return nil, fmt.Errorf("bench: ttyd: %w", err)
			}
			r.ttydP50, r.ttydP99 = percentiles(lat)
		}

		b.logf("round %d of %d: cat of %d MiB", i+1, b.sz.rounds, b.sz.catBytes>>20)
		r.atelierRate, r.atelierCPU, err = catRate(at, "big.txt", b.srv.Pid())
		if err != nil {
			return nil, fmt.Errorf("bench: atelier: %w", err)
		}
		if r.rawRate, err = rawThroughput(local); err != nil {
			return nil, err
		}
		if tt != nil {
			r.ttydRate, r.ttydCPU, err = catRate(tt, local, tt.server.cmd.Process.Pid)
			if err != nil {
				return nil, fmt.Errorf("bench: ttyd: %w", err)
			}
		}
		rounds = append(rounds, r)
	}
	_ = at.send("rm -f big.txt\n")
	return terminalRows(rounds, len(keys), b.sz.catBytes, whyNot), nil
}

// terminalRows judges the medians of the rounds against the targets;
// whyNot is set when ttyd was not measured.
func terminalRows(rounds []terminalRound, keys int, catBytes int64, whyNot string) []row {
	col := func(pick func(terminalRound) float64) figure {
		f := make(figure, len(rounds))
		for i, r := range rounds {
			f[i] = pick(r)
		}
		return f
	}
	atP50, atP99, atRate := col(func(r terminalRound) float64 { return r.atelierP50 }),
		col(func(r terminalRound) float64 { return r.atelierP99 }), col(func(r terminalRound) float64 { return r.atelierRate })
	rawP50, rawP99, rawRate := col(func(r terminalRound) float64 { return r.rawP50 }),
		col(func(r terminalRound) float64 { return r.rawP99 }), col(func(r terminalRound) float64 { return r.rawRate })
	ttydP50, ttydP99, ttydRate := col(func(r terminalRound) float64 { return r.ttydP50 }),
		col(func(r terminalRound) float64 { return r.ttydP99 }), col(func(r terminalRound) float64 { return r.ttydRate })

	floorP50, floorP99 := col(func(r terminalRound) float64 { return r.floorP50 }), col(func(r terminalRound) float64 { return r.floorP99 })
	handler := col(func(r terminalRound) float64 { return r.handlerMean })

	keyRow := row{measure: fmt.Sprintf("keystroke round trip (one byte → its echo, %d keys; Atelier: POST → SSE stream), p50 / p99", keys),
		atelier: msFig(atP50) + " / " + msFig(atP99),
		anchor: "raw PTY " + msFig(rawP50) + " / " + msFig(rawP99) +
			"; HTTP floor (the same POST to a bare Go server in another process) " + msFig(floorP50) + " / " + msFig(floorP99) + "; ",
		target: "p50 ≤ 0.4 ms; p99 shown beside the HTTP floor's"}
	p50, p99, rate := atP50.median(), atP99.median(), atRate.median()
	// Where a keystroke's time goes: Atelier's handlers (from its own
	// request metrics), and what is left of the floor.
	keyNote := fmt.Sprintf("p99 %.1f × the HTTP floor's; Atelier's handlers take %s ms of a key", p99/floorP99.median(), msNum(handler.median()))
	tputRow := row{measure: fmt.Sprintf("terminal throughput (cat of %d MiB, cooked terminal, client decoding text and base64 events (Atelier) or WebSocket frames (ttyd))", catBytes>>20),
		atelier: mbsFig(atRate),
		anchor:  "raw PTY " + mbsFig(rawRate) + "; ",
		target:  "≥ ttyd's in every round and ≥ 0.9 of the raw PTY"}
	if whyNot != "" {
		keyRow.anchor += "ttyd: not measured (" + whyNot + ")"
		keyRow.result = judge(keyNote, atMost("p50", p50, 0.0004, "0.4 ms"))
		tputRow.anchor += "ttyd: not measured (" + whyNot + ")"
		tputNote := cpuNote("Atelier", rounds, func(r terminalRound) cpuUse { return r.atelierCPU })
		tputRow.result = judge("ttyd's share not judged; "+tputNote, shareOf(rate, rawRate.median(), 0.9, "raw"))
		return []row{keyRow, tputRow}
	}
	keyRow.anchor += "ttyd " + msFig(ttydP50) + " / " + msFig(ttydP99)
	keyNote += fmt.Sprintf("; ttyd's p50 %.1f ×, p99 %.1f × the floor's", ttydP50.median()/floorP50.median(), ttydP99.median()/floorP99.median())
	keyRow.result = judge(keyNote, atMost("p50", p50, 0.0004, "0.4 ms"))
	tputRow.anchor += "ttyd " + mbsFig(ttydRate)
	// Against ttyd round by round: the worst round's share is the verdict.
	worst := 0
	for i, r := range rounds {
		if r.atelierRate/r.ttydRate < rounds[worst].atelierRate/rounds[worst].ttydRate {
			worst = i
		}
	}
	tputNote := cpuNote("Atelier", rounds, func(r terminalRound) cpuUse { return r.atelierCPU }) + "; " +
		cpuNote("ttyd", rounds, func(r terminalRound) cpuUse { return r.ttydCPU })
	tputRow.result = judge(tputNote, shareOf(rounds[worst].atelierRate, rounds[worst].ttydRate, 1, "ttyd in its worst round"),
		shareOf(rate, rawRate.median(), 0.9, "raw"))
	return []row{keyRow, tputRow}
}

// cpuNote says how busy a server, its client and the whole machine kept
// the processors during the cat, in cores (medians of the rounds), beside
// how many the machine has: the machine's less the two is the shell, cat,
// the kernel's PTY and anything else running.
func cpuNote(server string, rounds []terminalRound, pick func(terminalRound) cpuUse) string {
	cores := func(f func(cpuUse) float64) float64 {
		fig := make(figure, len(rounds))
		for i, r := range rounds {
			u := pick(r)
			fig[i] = f(u) / u.wall
		}
		return fig.median()
	}
	return fmt.Sprintf("during the cat %s's server kept %.2f of the %d cores busy, its client %.2f, the whole machine %.2f",
		server, cores(func(u cpuUse) float64 { return u.server }), runtime.NumCPU(),
		cores(func(u cpuUse) float64 { return u.client }), cores(func(u cpuUse) float64 { return u.machine }))
}

// atelierTerminal opens a session and a terminal in it, attached to its
// stream.
func (b *bench) atelierTerminal() (*shell, error) {
	base, err := b.session("bench-terminal", nil)
	if err != nil {
		return nil, err
	}
	var term struct {
		ID      string `json:"id"`
		NextSeq uint64 `json:"nextSeq"`
	}
	if err := b.c.PostJSON(base+"/terminals", url.Values{"cols": {"120"}, "rows": {"40"}}, &term); err != nil {
		return nil, fmt.Errorf("bench: open terminal: %w", err)
	}
	t := &shell{stream: stream{out: make(chan []byte, 1024)}, c: b.c, base: base + "/terminals/" + term.ID, seq: term.NextSeq}
	if err := t.attach(); err != nil {
		return nil, err
	}
	return t, nil
}

// ttydTerminal finds or builds ttyd, starts it and opens a terminal on it,
// or says why ttyd is not measured.
func (b *bench) ttydTerminal() (t *ttydTerm, whyNot string) {
	bin, whyNot := findTTYD(b.ttydSrc, b.logw)
	if bin == "" {
		b.logf("ttyd: not measured: %s", whyNot)
		return nil, whyNot
	}
	srv, err := startTTYD(bin, b.tmp, b.logw)
	if err != nil {
		return nil, bin + " did not start: " + err.Error()
	}
	b.stopTTYD = srv.stop
	if t, err = srv.open(120, 40); err != nil {
		return nil, bin + " did not open a terminal: " + err.Error()
	}
	b.logf("ttyd: %s", bin)
	return t, ""
}

// terminal is one terminal as a client sees it: keys go in, decoded output
// comes out.
type terminal interface {
	send(keys string) error
	waitFor(mark []byte, timeout time.Duration) error
	settle()
	resetCount()
	count() int64
}

var _, _ terminal = (*shell)(nil), (*ttydTerm)(nil)

// keystrokes types keys into cat in t's shell, one at a time, each when
// the previous one's echo has come back. The echo comes from the line
// discipline of the cooked terminal, as with the raw PTY.
func keystrokes(t terminal, keys []byte) ([]time.Duration, error) {
	if err := t.send("cat >/dev/null\n"); err != nil {
		return nil, err
	}
	t.settle()
	lat := make([]time.Duration, 0, len(keys))
	for _, k := range keys {
		start := time.Now()
		if err := t.send(string(k)); err != nil {
			return nil, err
		}
		if err := t.waitFor([]byte{echoOf(k)}, 10*time.Second); err != nil {
			return nil, fmt.Errorf("echo of key %q: %w", k, err)
		}
		lat = append(lat, time.Since(start))
	}
	if err := t.send("\x03"); err != nil {
		return nil, err
	}
	t.settle()
	return lat, nil
}

// catRate times cat of path in t's shell, until a mark that neither the
// typed command line nor the file can hold (the file is base64 text, and
// the mark has a '.'), and answers the bytes a second received
// and the processor time of the terminal's server (process server), its
// client and the machine meanwhile.
func catRate(t terminal, path string, server int) (rate float64, cpu cpuUse, err error) {
	t.settle()
	cpu, err = measureCPU(server, func() error {
		start := time.Now()
		if err := t.send("cat " + path + "; printf 'EN%s.D\\n' X\n"); err != nil {
			return err
		}
		t.resetCount()
		if err := t.waitFor([]byte("ENX.D"), 10*time.Minute); err != nil {
			return fmt.Errorf("cat: %w", err)
		}
		rate = float64(t.count()) / time.Since(start).Seconds()
		return nil
	})
	return rate, cpu, err
}

func percentiles(lat []time.Duration) (p50, p99 float64) {
	return liveserver.Percentile(lat, 50).Seconds(), liveserver.Percentile(lat, 99).Seconds()
}

// keyList is the keys typed: letters, and a newline now and then so the
// line cat reads stays short.
func keyList(n int) []byte {
	keys := make([]byte, n)
	for i := range keys {
		keys[i] = byte('a' + i%26)
		if i%64 == 63 {
			keys[i] = '\r'
		}
	}
	return keys
}

// echoOf is the last byte the terminal echoes for k: a carriage return
// comes back as CR LF.
func echoOf(k byte) byte {
	if k == '\r' {
		return '\n'
	}
	return k
}

// rawKeystrokes types keys into cat on a PTY of this process: the floor
// any terminal over a network adds to.
func rawKeystrokes(keys []byte) ([]time.Duration, error) {
	cmd := exec.Command("cat")
	f, err := pty.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("bench: raw pty: %w", err)
	}
	defer func() { f.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	return echoTimes(f, f, keys)
}

// echoTimes types keys into w one at a time, each once the echo of the
// one before has come back from r, and answers how long each took.
func echoTimes(w io.Writer, r io.Reader, keys []byte) ([]time.Duration, error) {
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, len(keys))
	for _, k := range keys {
		start := time.Now()
		if _, err := w.Write([]byte{k}); err != nil {
			return nil, err
		}
		for want := echoOf(k); ; {
			n, err := r.Read(buf)
			if err != nil {
				return nil, err
			}
			if bytes.IndexByte(buf[:n], want) >= 0 {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// writeCatFile writes lines like those of base64 -w 100 of raw random
// bytes, as the sandbox's file is made: the file the raw PTY and ttyd
// print.
func writeCatFile(path string, raw int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := base64.StdEncoding
	chunk := make([]byte, 75) // 100 characters a line
	line := make([]byte, 101)
	w := bufio.NewWriter(f)
	for left := raw; left > 0; left -= int64(len(chunk)) {
		n := min(int64(len(chunk)), left)
		_, _ = rand.Read(chunk[:n]) // the same kind of text as the sandbox's file
		enc.Encode(line, chunk[:n])
		m := enc.EncodedLen(int(n))
		line[m] = '\n'
		_, _ = w.Write(line[:m+1])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// rawThroughput times cat of path on a PTY of this process, read to the
// end.
func rawThroughput(path string) (float64, error) {
	cmd := exec.Command("cat", path)
	start := time.Now()
	p, err := pty.Start(cmd)
	if err != nil {
		return 0, fmt.Errorf("bench: raw pty: %w", err)
	}
	n, _ := io.Copy(io.Discard, p) // ends with EIO when cat closes its side
	elapsed := time.Since(start)
	p.Close()
	_ = cmd.Wait()
	return float64(n) / elapsed.Seconds(), nil
}

// shell is a terminal of the server seen as a person's page sees it: input
// POSTed with sequence numbers, output read from the SSE stream and
// decoded.
type shell struct {
	stream
	c    *liveserver.Client
	base string
	seq  uint64
	body io.Closer
}

// stream is a terminal's decoded output as it arrives, and what has been
// looked at of it.
type stream struct {
	out      chan []byte
	tail     []byte // the last bytes seen, for marks split across messages
	received int64  // bytes since resetCount
	// ended says why out was closed; it is set before the close.
	ended error
}

func (s *stream) resetCount()  { s.received = 0 }
func (s *stream) count() int64 { return s.received }

func (s *shell) attach() error {
	req, _ := http.NewRequest(http.MethodGet, s.c.Base+s.base+"/stream", nil)
	req.Header.Set("Accept", "text/event-stream")
	hc := &http.Client{Jar: s.c.HC.Jar} // no timeout: the stream stays open
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("bench: stream: status %d", resp.StatusCode)
	}
	s.body = resp.Body
	go func() {
		defer close(s.out)
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		var event string
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				s.ended = fmt.Errorf("after a %q event: %w", event, err)
				return
			}
			line = bytes.TrimRight(line, "\n")
			switch {
			case bytes.HasPrefix(line, []byte("event: ")):
				event = string(line[7:])
			case bytes.HasPrefix(line, []byte("data: ")) && event == "out":
				data := line[6:]
				dec := make([]byte, base64.StdEncoding.DecodedLen(len(data)))
				n, err := base64.StdEncoding.Decode(dec, data)
				if err != nil {
					s.ended = fmt.Errorf("out event: %w", err)
					return
				}
				s.out <- dec[:n]
			case bytes.HasPrefix(line, []byte("data: ")) && event == "text":
				dec, err := wire.AppendText(nil, line[6:])
				if err != nil {
					s.ended = fmt.Errorf("text event: %w", err)
					return
				}
				s.out <- dec
			}
		}
	}()
	return nil
}

func (s *shell) stop() { s.body.Close() }

// send POSTs keys as the next input.
func (s *shell) send(keys string) error {
	req, _ := http.NewRequest(http.MethodPost, s.c.Base+s.base+"/input", strings.NewReader(keys))
	req.Header.Set("X-Input-Seq", strconv.FormatUint(s.seq, 10))
	resp, err := s.c.Do(req)
	if err != nil {
		return fmt.Errorf("bench: input: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.seq++
	return nil
}

// waitFor reads output until mark has appeared.
func (s *stream) waitFor(mark []byte, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case p, ok := <-s.out:
			if !ok {
				return fmt.Errorf("stream ended: %w", s.ended)
			}
			s.received += int64(len(p))
			s.tail = append(s.tail, p...)
			found := bytes.Contains(s.tail, mark)
			if keep := len(mark) - 1; len(s.tail) > keep {
				s.tail = append(s.tail[:0], s.tail[len(s.tail)-keep:]...)
			}
			if found {
				s.tail = s.tail[:0]
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no %q within %s", mark, timeout)
		}
	}
}

// settle drops output until the shell has been quiet for a moment, or
// its stream has ended (the next wait says so).
func (s *stream) settle() {
	for {
		select {
		case _, ok := <-s.out:
			if !ok {
				return
			}
		case <-time.After(300 * time.Millisecond):
			s.tail = s.tail[:0]
			return
		}
	}
}

// commandRound is one round's command figures, in seconds.
type commandRound struct {
	smallP50, largeP50, checkout, importTime float64
	// The first command of a fresh session of the small project (its
	// checkout and disk), and of a second person's session of the large
	// project's commit, after the first one's.
	smallFirst, secondFirst float64
	// The first command of the second person's session opened again, run
	// a person's pause after opening it (personPause).
	pausedFirst float64
	// The small project's on the server with the disk bound off.
	bareFirst, bareP50           float64
	bash, gitCommit, gitCheckout float64
	// Where the small project's commands went, and the second person's
	// first command (at once and after a pause), from the server's metrics.
	small, secondStages, pausedStages stages
	// The import's phases as its progress stream told them, and the export
	// of the tree by git archive and tar.
	importWriting, importPublishing, gitExport float64
}

// commands measures imports, the first command's checkout and one-shot
// commands on a small and a large project, and the small project's on a
// server with the disk bound off. Each round opens fresh sessions and
// imports a large tree of its own into a new project, so its import and
// first commands are fresh.
func (b *bench) commands() ([]row, error) {
	small, err := makeTree(b.sz.smallFiles, 0)
	if err != nil {
		return nil, err
	}
	smallID, err := project(b.c, "bench-small", small.archive)
	if err != nil {
		return nil, err
	}
	b.logf("a second server, with the disk bound off (ATELIER_SANDBOX_DISK_BYTES=0)")
	bareSrv, bare, err := startServer(b.logw, "ATELIER_SANDBOX_DISK_BYTES=0")
	if err != nil {
		return nil, err
	}
	b.noDisk = bareSrv
	defer func() { bareSrv.Stop(); b.noDisk = nil }()
	bareID, err := project(bare, "bench-small", small.archive)
	if err != nil {
		return nil, err
	}
	// A person has one session of a project at a time: the second session
	// of a commit is another person's.
	second, err := secondPerson(b.srv, b.c)
	if err != nil {
		return nil, err
	}

	var rounds []commandRound
	var large *tree
	for i := range b.sz.rounds {
		var r commandRound
		// A tree of its own each round: the object store keeps what an
		// earlier round's import stored.
		if large, err = makeTree(b.sz.largeFiles, i+1); err != nil {
			return nil, err
		}
		b.logf("round %d of %d: one-shot commands on %d files", i+1, b.sz.rounds, b.sz.smallFiles)
		smallBase, err := openSession(b.c, smallID)
		if err != nil {
			return nil, err
		}
		first, err := oneShot(b.c, smallBase)
		if err != nil {
			return nil, err
		}
		r.smallFirst = first.Seconds()
		var smallRuns []time.Duration
		r.small, err = b.staged(func() (err error) {
			smallRuns, err = oneShots(b.c, smallBase, b.sz.runs)
			return err
		})
		if err != nil {
			return nil, err
		}
		r.smallP50 = liveserver.Percentile(smallRuns, 50).Seconds()
		// A person has one session of a project at a time: this one ends,
		// so that the next round's is fresh.
		if err := b.c.Post(smallBase+"/discard", nil); err != nil {
			return nil, err
		}

		b.logf("round %d of %d: the same with the disk bound off", i+1, b.sz.rounds)
		bareBase, err := openSession(bare, bareID)
		if err != nil {
			return nil, err
		}
		if first, err = oneShot(bare, bareBase); err != nil {
			return nil, err
		}
		r.bareFirst = first.Seconds()
		bareRuns, err := oneShots(bare, bareBase, b.sz.runs)
		if err != nil {
			return nil, err
		}
		r.bareP50 = liveserver.Percentile(bareRuns, 50).Seconds()
		if err := bare.Post(bareBase+"/discard", nil); err != nil {
			return nil, err
		}

		b.logf("round %d of %d: import of %d files (%d KiB .tar.gz)", i+1, b.sz.rounds, b.sz.largeFiles, len(large.archive)>>10)
		id, err := b.c.CreateProject(fmt.Sprintf("bench-large-%d", i+1))
		if err != nil {
			return nil, err
		}
		start := time.Now()
		phases, err := b.importWatched(id, "large.tar.gz", large.archive)
		if err != nil {
			return nil, err
		}
		r.importTime = time.Since(start).Seconds()
		r.importWriting, r.importPublishing = phases["writing"].Seconds(), phases["publishing"].Seconds()
		largeBase, err := openSession(b.c, id)
		if err != nil {
			return nil, err
		}
		b.logf("round %d of %d: one-shot commands on %d files", i+1, b.sz.rounds, b.sz.largeFiles)
		largeFirst, err := oneShot(b.c, largeBase)
		if err != nil {
			return nil, err
		}
		largeRuns, err := oneShots(b.c, largeBase, b.sz.runs)
		if err != nil {
			return nil, err
		}
		largeP50 := liveserver.Percentile(largeRuns, 50)
		r.largeP50 = largeP50.Seconds()
		r.checkout = max(largeFirst-largeP50, 0).Seconds()
		b.logf("round %d of %d: a second person's session of the same commit", i+1, b.sz.rounds)
		if err := b.c.Post(fmt.Sprintf("/projects/%d/members", id), url.Values{"username": {secondName}, "role": {"admin"}}); err != nil {
			return nil, fmt.Errorf("bench: make the second person an admin of the project: %w", err)
		}
		secondBase, err := openSession(second, id)
		if err != nil {
			return nil, err
		}
		r.secondStages, err = b.staged(func() (err error) {
			first, err = oneShot(second, secondBase)
			return err
		})
		if err != nil {
			return nil, err
		}
		r.secondFirst = first.Seconds()
		// Opening a session prepares its sandbox while the person reads
		// the page: the same person's next session, with a command a
		// person's pause after opening it.
		if err := second.Post(secondBase+"/discard", nil); err != nil {
			return nil, err
		}
		againBase, err := openSession(second, id)
		if err != nil {
			return nil, err
		}
		time.Sleep(personPause)
		r.pausedStages, err = b.staged(func() (err error) {
			first, err = oneShot(second, againBase)
			return err
		})
		if err != nil {
			return nil, err
		}
		r.pausedFirst = first.Seconds()
		if err := second.Post(againBase+"/discard", nil); err != nil {
			return nil, err
		}

		b.logf("round %d of %d: anchors: bash -c true, git add and commit, git checkout", i+1, b.sz.rounds)
		var bashRuns []time.Duration
		for range b.sz.runs {
			start := time.Now()
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				return nil, err
			}
			bashRuns = append(bashRuns, time.Since(start))
		}
		r.bash = liveserver.Percentile(bashRuns, 50).Seconds()
		commit, checkout, export, err := gitAnchors(filepath.Join(b.tmp, fmt.Sprintf("git-%d", i+1)), large)
		if err != nil {
			return nil, err
		}
		r.gitCommit, r.gitCheckout, r.gitExport = commit.Seconds(), checkout.Seconds(), export.Seconds()
		rounds = append(rounds, r)
	}
	return b.commandRows(rounds, len(large.archive)), nil
}

func (b *bench) commandRows(rounds []commandRound, archiveBytes int) []row {
	col := func(pick func(commandRound) float64) figure {
		f := make(figure, len(rounds))
		for i, r := range rounds {
			f[i] = pick(r)
		}
		return f
	}
	small, large := col(func(r commandRound) float64 { return r.smallP50 }), col(func(r commandRound) float64 { return r.largeP50 })
	smallFirst, second := col(func(r commandRound) float64 { return r.smallFirst }), col(func(r commandRound) float64 { return r.secondFirst })
	paused := col(func(r commandRound) float64 { return r.pausedFirst })
	bareFirst, bareP50 := col(func(r commandRound) float64 { return r.bareFirst }), col(func(r commandRound) float64 { return r.bareP50 })
	checkout, imp := col(func(r commandRound) float64 { return r.checkout }), col(func(r commandRound) float64 { return r.importTime })
	bash := col(func(r commandRound) float64 { return r.bash })
	gitCommit, gitCheckout := col(func(r commandRound) float64 { return r.gitCommit }), col(func(r commandRound) float64 { return r.gitCheckout })

	writing, publishing := col(func(r commandRound) float64 { return r.importWriting }), col(func(r commandRound) float64 { return r.importPublishing })
	export := col(func(r commandRound) float64 { return r.gitExport })
	checkoutNote := "exporting the tree with `git archive` into `tar -x` alone takes " + msNum(export.median()) + " ms (" +
		fmt.Sprintf("%.1f", export.median()/gitCheckout.median()) + " × `git checkout`)"
	importNote := "writing the files into git " + msNum(writing.median()) + " ms, publishing them to the object store " +
		msNum(publishing.median()) + " ms (its progress stream)"
	smallNote := stagesNote(rounds, func(r commandRound) stages { return r.small }, "a command")
	secondNote := stagesNote(rounds, func(r commandRound) stages { return r.secondStages }, "the command")
	pausedNote := stagesNote(rounds, func(r commandRound) stages { return r.pausedStages }, "the command")
	return []row{
		{measure: fmt.Sprintf("one-shot `true`, %d-file project, p50 of %d", b.sz.smallFiles, b.sz.runs),
			atelier: msFig(small), anchor: "`bash -c true` " + msFig(bash),
			target: "≤ 15 ms", result: judge(smallNote, atMost("", small.median(), 0.015, "15 ms"))},
		{measure: fmt.Sprintf("one-shot `true`, %d-file project, p50 of %d", b.sz.largeFiles, b.sz.runs),
			atelier: msFig(large), anchor: fmt.Sprintf("%d-file project %s", b.sz.smallFiles, msFig(small)),
			target: "≤ 1.2 × the small project's", result: judge("", atMost("", large.median(), 1.2*small.median(), "1.2 × small"))},
		{measure: fmt.Sprintf("the same with the disk bound off (`ATELIER_SANDBOX_DISK_BYTES=0`): `true`, %d-file project, p50 of %d; a session's first command", b.sz.smallFiles, b.sz.runs),
			atelier: msFig(bareP50) + "; first " + msFig(bareFirst), anchor: "disk bound on (the default): " + msFig(small) + "; first " + msFig(smallFirst),
			target: "none: the disk's cost, shown", result: fmt.Sprintf("the disk bound costs %+.1f ms a command, %+.0f ms a session's first",
				1000*(small.median()-bareP50.median()), 1000*(smallFirst.median()-bareFirst.median()))},
		{measure: fmt.Sprintf("first command's checkout, %d files (first `true` less the p50)", b.sz.largeFiles),
			atelier: msFig(checkout), anchor: "`git checkout` " + msFig(gitCheckout),
			target: "≤ 1.2 × `git checkout`", result: judge(checkoutNote, atMost("", checkout.median(), 1.2*gitCheckout.median(), "1.2 × git"))},
		{measure: fmt.Sprintf("a second session's first command, same commit (another person's), %d files", b.sz.largeFiles),
			atelier: msFig(second), anchor: "`true` in a session with its checkout " + msFig(large),
			target: "≤ 1.1 × that", result: judge(secondNote, atMost("", second.median(), 1.1*large.median(), "1.1 × a checked-out session's"))},
		{measure: fmt.Sprintf("the same, run %s after opening the session, as a person would (the sandbox is prepared meanwhile)", personPause),
			atelier: msFig(paused), anchor: "`true` in a session with its checkout " + msFig(large),
			target: "≤ 1.1 × that", result: judge(pausedNote, atMost("", paused.median(), 1.1*large.median(), "1.1 × a checked-out session's"))},
		{measure: fmt.Sprintf("import, %d files (%.1f MiB .tar.gz over HTTP)", b.sz.largeFiles, float64(archiveBytes)/(1<<20)),
			atelier: msFig(imp), anchor: "`git init && git add -A && git commit` " + msFig(gitCommit),
			target: "≤ 1.5 × git", result: judge(importNote, atMost("", imp.median(), 1.5*gitCommit.median(), "1.5 × git"))},
	}
}

// personPause is how long after opening a session a person's first
// command comes at the soonest: the page loads and is read first.
const personPause = time.Second

// secondName is the second person, whom each large project makes one of
// its admins (who may open sessions).
const secondName = "bench-second"

// secondPerson adds the second person through admin's client and signs
// them in.
func secondPerson(srv *liveserver.Server, admin *liveserver.Client) (*liveserver.Client, error) {
	const password = "bench-second-password-1"
	if err := admin.Post("/admin/users", url.Values{"username": {secondName}, "password": {password}}); err != nil {
		return nil, fmt.Errorf("bench: add a second person: %w", err)
	}
	return liveserver.SignIn(srv.Base, secondName, password)
}

// oneShot runs `true` once through c in the session at base, and times
// it.
func oneShot(c *liveserver.Client, base string) (time.Duration, error) {
	var res struct {
		ExitCode int `json:"exitCode"`
	}
	start := time.Now()
	if err := c.PostJSON(base+"/commands", url.Values{"command": {"true"}}, &res); err != nil {
		return 0, fmt.Errorf("bench: command: %w", err)
	}
	d := time.Since(start)
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("bench: `true` exited %d", res.ExitCode)
	}
	return d, nil
}

// oneShots runs `true` n times in the session at base.
func oneShots(c *liveserver.Client, base string, n int) ([]time.Duration, error) {
	runs := make([]time.Duration, 0, n)
	for range n {
		d, err := oneShot(c, base)
		if err != nil {
			return nil, err
		}
		runs = append(runs, d)
	}
	return runs, nil
}

// gitAnchors writes the tree to disk, times git init, add and commit of
// it, git checkout of that commit into a fresh clone that shares its
// objects, and git archive of it unpacked by tar.
func gitAnchors(dir string, tr *tree) (commit, checkout, export time.Duration, err error) {
	src := filepath.Join(dir, "src")
	if err := tr.write(src); err != nil {
		return 0, 0, 0, err
	}
	git := func(dir string, args ...string) error {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost",
			"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("bench: git %s: %w: %s", args[0], err, out)
		}
		return nil
	}
	start := time.Now()
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "tree"}} {
		if err := git(src, args...); err != nil {
			return 0, 0, 0, err
		}
	}
	commit = time.Since(start)
	dst := filepath.Join(dir, "dst")
	if err := exec.Command("git", "clone", "-q", "--shared", "--no-checkout", src, dst).Run(); err != nil {
		return 0, 0, 0, fmt.Errorf("bench: git clone: %w", err)
	}
	start = time.Now()
	if err := git(dst, "checkout", "-q", "-f", "HEAD", "--", "."); err != nil {
		return 0, 0, 0, err
	}
	checkout = time.Since(start)
	// The way a session's base is made: the tree streamed out by git
	// archive and unpacked, here by tar.
	out := filepath.Join(dir, "export")
	if err := os.Mkdir(out, 0o755); err != nil {
		return 0, 0, 0, err
	}
	start = time.Now()
	sh := exec.Command("sh", "-c", `git -C "$1" archive HEAD | tar -x -C "$2"`, "sh", src, out)
	if b, err := sh.CombinedOutput(); err != nil {
		return 0, 0, 0, fmt.Errorf("bench: git archive | tar: %w: %s", err, b)
	}
	return commit, checkout, time.Since(start), nil
}

// msNum is seconds as milliseconds, with two decimals below 10 ms.
func msNum(sec float64) string {
	if sec < 0.010 {
		return fmt.Sprintf("%.2f", sec*1000)
	}
	return fmt.Sprintf("%.0f", sec*1000)
}

func msFig(f figure) string { return f.show(msNum, "ms") }

func mbsFig(f figure) string {
	return f.show(func(rate float64) string { return fmt.Sprintf("%.1f", rate/1e6) }, "MB/s")
}

// verdict is one figure judged against one bound.
type verdict struct {
	ok   bool
	text string
}

// atMost judges a figure against an upper bound; what names the figure
// when a row judges more than one.
func atMost(what string, got, bound float64, name string) verdict {
	prefix := ""
	if what != "" {
		prefix = what + " "
	}
	if got <= bound {
		return verdict{true, prefix + "≤ " + name}
	}
	ratio := fmt.Sprintf("%.1f", got/bound)
	if got/bound < 2 { // a near miss is not rounded into "1.0 ×"
		ratio = fmt.Sprintf("%.2f", got/bound)
	}
	return verdict{false, prefix + ratio + " × " + name}
}

// shareOf judges a rate against the least share of its anchor's.
func shareOf(got, anchor, least float64, name string) verdict {
	if got >= least*anchor {
		return verdict{true, fmt.Sprintf("%.2f of %s", got/anchor, name)}
	}
	// Three places, so a near miss does not read as the bound itself.
	return verdict{false, fmt.Sprintf("%.3f of %s, short of %.2f", got/anchor, name, least)}
}

// judge is a row's result: "met" when every verdict is, else "misses", then
// each verdict and the note.
func judge(note string, vs ...verdict) string {
	met := true
	texts := make([]string, 0, len(vs)+1)
	for _, v := range vs {
		met = met && v.ok
		texts = append(texts, v.text)
	}
	if note != "" {
		texts = append(texts, note)
	}
	if met {
		return "met (" + strings.Join(texts, "; ") + ")"
	}
	return "misses: " + strings.Join(texts, "; ")
}
