package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/creack/pty"

	"atelier/internal/liveserver"
)

type bench struct {
	sz   sizes
	logw io.Writer
	srv  *liveserver.Server
	c    *liveserver.Client
	tmp  string
}

func newBench(sz sizes, logw io.Writer) (*bench, error) {
	srv, err := liveserver.Start(logw, "ATELIER_SANDBOX_DISK_BYTES=0",
		"ATELIER_IMPORT_MAX_BYTES="+strconv.Itoa(1<<30), "ATELIER_IMPORTS_PER_HOUR=1000")
	if err != nil {
		return nil, err
	}
	b := &bench{sz: sz, logw: logw, srv: srv}
	if b.c, err = liveserver.SignIn(srv.Base, "admin", liveserver.AdminPassword); err != nil {
		srv.Stop()
		return nil, err
	}
	if b.tmp, err = os.MkdirTemp("", "atelier-bench-"); err != nil {
		srv.Stop()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	b.srv.Stop()
	os.RemoveAll(b.tmp)
}

func (b *bench) logf(format string, args ...any) { fmt.Fprintf(b.logw, "bench: "+format+"\n", args...) }

// session makes a project, imports archive into it when given, and opens
// an edit session: the answer is the session's URL.
func (b *bench) session(name string, archive []byte) (string, error) {
	id, err := b.c.CreateProject(name)
	if err != nil {
		return "", err
	}
	if archive != nil {
		if err := b.c.Import(id, name+".tar.gz", archive); err != nil {
			return "", err
		}
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := b.c.PostJSON(fmt.Sprintf("/projects/%d/sessions", id), nil, &s); err != nil {
		return "", fmt.Errorf("bench: open session: %w", err)
	}
	return fmt.Sprintf("/projects/%d/sessions/%s", id, s.ID), nil
}

// ttydNote says why ttyd's rows are empty: it would need a WebSocket
// client and, where absent, its source and libwebsockets to build it.
func ttydNote() string {
	if _, err := exec.LookPath("ttyd"); err != nil {
		return "ttyd: not measured (not installed, no package in this machine's sources)"
	}
	return "ttyd: not measured (no WebSocket client in this module)"
}

// terminal measures keystrokes and throughput in one shell.
func (b *bench) terminal() ([]row, error) {
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
	t := &shell{c: b.c, base: base + "/terminals/" + term.ID, seq: term.NextSeq, out: make(chan []byte, 1024)}
	if err := t.attach(); err != nil {
		return nil, err
	}
	defer t.stop()

	// Keystrokes go to cat in the cooked terminal, so the echo comes from
	// the line discipline, as with the raw PTY below.
	if err := t.send("cat >/dev/null\n"); err != nil {
		return nil, err
	}
	t.settle()
	b.logf("keystrokes: %d over HTTP", b.sz.keys)
	keys := keyList(b.sz.keys)
	var lat []time.Duration
	for _, k := range keys {
		start := time.Now()
		if err := t.send(string(k)); err != nil {
			return nil, err
		}
		if err := t.waitFor([]byte{echoOf(k)}, 10*time.Second); err != nil {
			return nil, fmt.Errorf("bench: echo of key %q: %w", k, err)
		}
		lat = append(lat, time.Since(start))
	}
	rawLat, err := rawKeystrokes(keys)
	if err != nil {
		return nil, err
	}
	p50, p99 := liveserver.Percentile(lat, 50), liveserver.Percentile(lat, 99)
	keyRow := row{measure: fmt.Sprintf("keystroke round trip (POST one byte → its echo on the SSE stream, %d keys), p50 / p99", len(keys)),
		atelier: ms(p50) + " / " + ms(p99),
		anchor:  "raw PTY " + ms(liveserver.Percentile(rawLat, 50)) + " / " + ms(liveserver.Percentile(rawLat, 99)) + "; " + ttydNote(),
		target:  "p50 ≤ 2 × ttyd's and ≤ 0.4 ms; p99 ≤ 2 × ttyd's",
		result:  atMost(p50.Seconds(), 0.0004, "0.4 ms") + "; ttyd's share not judged"}

	// Throughput: cat of a file of printable lines (base64 text, so the
	// cooked terminal passes every byte), until a mark the typed command
	// line does not itself contain.
	if err := t.send("\x03"); err != nil {
		return nil, err
	}
	t.settle()
	b.logf("throughput: cat of %d MiB", b.sz.catBytes>>20)
	raw := b.sz.catBytes / 4 * 3
	if err := t.send(fmt.Sprintf("head -c %d /dev/urandom | base64 -w 100 > big.txt; printf 'REA%%sDY\\n' X\n", raw)); err != nil {
		return nil, err
	}
	if err := t.waitFor([]byte("REAXDY"), 5*time.Minute); err != nil {
		return nil, fmt.Errorf("bench: make the file: %w", err)
	}
	t.settle()
	start := time.Now()
	if err := t.send("cat big.txt; printf 'EN%sD\\n' X\n"); err != nil {
		return nil, err
	}
	t.received = 0
	if err := t.waitFor([]byte("ENXD"), 10*time.Minute); err != nil {
		return nil, fmt.Errorf("bench: cat: %w", err)
	}
	atelierRate := float64(t.received) / time.Since(start).Seconds()
	_ = t.send("rm -f big.txt\n")

	rawRate, err := rawThroughput(filepath.Join(b.tmp, "big.txt"), raw)
	if err != nil {
		return nil, err
	}
	tputRow := row{measure: fmt.Sprintf("terminal throughput (cat of %d MiB, cooked terminal, client decoding base64)", b.sz.catBytes>>20),
		atelier: mbs(atelierRate),
		anchor:  "raw PTY " + mbs(rawRate) + "; " + ttydNote(),
		target:  "≥ ttyd's and ≥ 0.85 of the raw PTY",
		result:  shareOf(atelierRate, rawRate, 0.85, "raw") + "; ttyd's share not judged"}
	return []row{keyRow, tputRow}, nil
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
	buf := make([]byte, 4096)
	var lat []time.Duration
	for _, k := range keys {
		start := time.Now()
		if _, err := f.Write([]byte{k}); err != nil {
			return nil, err
		}
		for want := echoOf(k); ; {
			n, err := f.Read(buf)
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

// rawThroughput writes a file like the terminal's and times cat of it on
// a PTY of this process, read to the end.
func rawThroughput(path string, raw int64) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	enc := base64.StdEncoding
	chunk := make([]byte, 75) // 100 characters a line, as base64 -w 100
	line := make([]byte, 101)
	w := bufio.NewWriter(f)
	for left := raw; left > 0; left -= int64(len(chunk)) {
		n := min(int64(len(chunk)), left)
		enc.Encode(line, chunk[:n])
		m := enc.EncodedLen(int(n))
		line[m] = '\n'
		_, _ = w.Write(line[:m+1])
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	f.Close()
	defer os.Remove(path)
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
	c        *liveserver.Client
	base     string
	seq      uint64
	out      chan []byte
	body     io.Closer
	tail     []byte // the last bytes seen, for marks split across events
	received int64  // bytes decoded since last reset
}

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
					return
				}
				s.out <- dec[:n]
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
func (s *shell) waitFor(mark []byte, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case p, ok := <-s.out:
			if !ok {
				return errors.New("stream ended")
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

// settle drops output until the shell has been quiet for a moment.
func (s *shell) settle() {
	for {
		select {
		case <-s.out:
		case <-time.After(300 * time.Millisecond):
			s.tail = s.tail[:0]
			return
		}
	}
}

// commands measures imports, the first command's checkout and one-shot
// commands on a small and a large project.
func (b *bench) commands() ([]row, error) {
	small, err := makeTree(b.sz.smallFiles)
	if err != nil {
		return nil, err
	}
	large, err := makeTree(b.sz.largeFiles)
	if err != nil {
		return nil, err
	}

	b.logf("one-shot commands on %d files", b.sz.smallFiles)
	smallBase, err := b.session("bench-small", small.archive)
	if err != nil {
		return nil, err
	}
	smallFirst, smallRuns, err := b.oneShots(smallBase)
	if err != nil {
		return nil, err
	}
	_ = smallFirst

	b.logf("import of %d files (%d KiB .tar.gz)", b.sz.largeFiles, len(large.archive)>>10)
	id, err := b.c.CreateProject("bench-large")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := b.c.Import(id, "large.tar.gz", large.archive); err != nil {
		return nil, err
	}
	importTime := time.Since(start)
	var s struct {
		ID string `json:"id"`
	}
	if err := b.c.PostJSON(fmt.Sprintf("/projects/%d/sessions", id), nil, &s); err != nil {
		return nil, fmt.Errorf("bench: open session: %w", err)
	}
	b.logf("one-shot commands on %d files", b.sz.largeFiles)
	largeFirst, largeRuns, err := b.oneShots(fmt.Sprintf("/projects/%d/sessions/%s", id, s.ID))
	if err != nil {
		return nil, err
	}

	b.logf("anchors: bash -c true, git add and commit, git checkout")
	var bashRuns []time.Duration
	for range b.sz.runs {
		start := time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			return nil, err
		}
		bashRuns = append(bashRuns, time.Since(start))
	}
	gitCommit, gitCheckout, err := gitAnchors(b.tmp, large)
	if err != nil {
		return nil, err
	}

	smallP50, largeP50 := liveserver.Percentile(smallRuns, 50), liveserver.Percentile(largeRuns, 50)
	checkout := max(largeFirst-largeP50, 0)
	return []row{
		{measure: fmt.Sprintf("one-shot `true`, %d-file project, p50 of %d", b.sz.smallFiles, len(smallRuns)),
			atelier: ms(smallP50), anchor: "`bash -c true` " + ms(liveserver.Percentile(bashRuns, 50)),
			target: "≤ 25 ms", result: atMost(smallP50.Seconds(), 0.025, "25 ms")},
		{measure: fmt.Sprintf("one-shot `true`, %d-file project, p50 of %d", b.sz.largeFiles, len(largeRuns)),
			atelier: ms(largeP50), anchor: fmt.Sprintf("%d-file project %s", b.sz.smallFiles, ms(smallP50)),
			target: "≤ 1.2 × the small project's", result: atMost(largeP50.Seconds(), 1.2*smallP50.Seconds(), "1.2 × small")},
		{measure: fmt.Sprintf("first command's checkout, %d files (first `true` less the p50)", b.sz.largeFiles),
			atelier: ms(checkout), anchor: "`git checkout` " + ms(gitCheckout),
			target: "≤ 1.5 × `git checkout`", result: atMost(checkout.Seconds(), 1.5*gitCheckout.Seconds(), "1.5 × git")},
		{measure: fmt.Sprintf("import, %d files (%.1f MiB .tar.gz over HTTP)", b.sz.largeFiles, float64(len(large.archive))/(1<<20)),
			atelier: ms(importTime), anchor: "`git init && git add -A && git commit` " + ms(gitCommit),
			target: "≤ 2 × git", result: atMost(importTime.Seconds(), 2*gitCommit.Seconds(), "2 × git")},
	}, nil
}

// oneShots runs `true` once (the first, which builds the checkout) and
// then sz.runs times.
func (b *bench) oneShots(base string) (first time.Duration, runs []time.Duration, err error) {
	for i := range b.sz.runs + 1 {
		var res struct {
			ExitCode int `json:"exitCode"`
		}
		start := time.Now()
		if err := b.c.PostJSON(base+"/commands", url.Values{"command": {"true"}}, &res); err != nil {
			return 0, nil, fmt.Errorf("bench: command: %w", err)
		}
		d := time.Since(start)
		if res.ExitCode != 0 {
			return 0, nil, fmt.Errorf("bench: `true` exited %d", res.ExitCode)
		}
		if i == 0 {
			first = d
		} else {
			runs = append(runs, d)
		}
	}
	return first, runs, nil
}

// gitAnchors writes the tree to disk, times git init, add and commit of
// it, then times git checkout of that commit into a fresh clone that
// shares its objects.
func gitAnchors(tmp string, tr *tree) (commit, checkout time.Duration, err error) {
	src := filepath.Join(tmp, "git-src")
	if err := tr.write(src); err != nil {
		return 0, 0, err
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
			return 0, 0, err
		}
	}
	commit = time.Since(start)
	dst := filepath.Join(tmp, "git-dst")
	if err := exec.Command("git", "clone", "-q", "--shared", "--no-checkout", src, dst).Run(); err != nil {
		return 0, 0, fmt.Errorf("bench: git clone: %w", err)
	}
	start = time.Now()
	if err := git(dst, "checkout", "-q", "-f", "HEAD", "--", "."); err != nil {
		return 0, 0, err
	}
	return commit, time.Since(start), nil
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.0f ms", float64(d.Milliseconds()))
}

func mbs(bytesPerSecond float64) string { return fmt.Sprintf("%.1f MB/s", bytesPerSecond/1e6) }

// atMost judges a figure against an upper bound.
func atMost(got, bound float64, name string) string {
	if got <= bound {
		return "met (≤ " + name + ")"
	}
	return fmt.Sprintf("misses: %.1f × %s", got/bound, name)
}

// shareOf judges a rate against the least share of its anchor's.
func shareOf(got, anchor, least float64, name string) string {
	if got >= least*anchor {
		return fmt.Sprintf("met (%.2f of %s)", got/anchor, name)
	}
	return fmt.Sprintf("misses: %.2f of %s, short of %.2f", got/anchor, name, least)
}
