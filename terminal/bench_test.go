package terminal

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"atelier/testrig/wait"
)

// Each benchmark measures its floor in the same run: the same shell on a
// bare PTY (or a bare HTTP response) without this package in between.

// sseReader reads events synchronously, as a lean client would.
type sseReader struct {
	br     *bufio.Reader
	buf    []byte // decoded data of the last text or out event
	decode bool   // false: count an event's bytes from its data, decoding nothing
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 256<<10), buf: make([]byte, 64<<10), decode: true}
}

// next returns the next event's name and id, and the length of a text or
// out event's bytes, decoded into r.buf[:n] when r.decode is set.
func (r *sseReader) next() (name string, id uint64, n int, err error) {
	for {
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return "", 0, 0, err
		}
		line = line[:len(line)-1]
		switch {
		case len(line) == 0:
			if name != "" {
				return name, id, n, nil
			}
		case bytes.HasPrefix(line, []byte("event: ")):
			name = string(line[7:])
		case bytes.HasPrefix(line, []byte("id: ")):
			id, _ = strconv.ParseUint(string(line[4:]), 10, 64)
		case bytes.HasPrefix(line, []byte("data: ")) && name == "out":
			data := line[6:]
			if !r.decode {
				n = len(data)/4*3 - bytes.Count(data[max(0, len(data)-2):], []byte("="))
				break
			}
			if n, err = base64.StdEncoding.Decode(r.buf, data); err != nil {
				return "", 0, 0, err
			}
		case bytes.HasPrefix(line, []byte("data: ")) && name == "text":
			data := line[6:]
			if !r.decode {
				n = unquotedLen(data)
				break
			}
			b, err := AppendText(r.buf[:0], data)
			if err != nil {
				return "", 0, 0, err
			}
			r.buf, n = b[:cap(b)], len(b)
		}
	}
}

// unquotedLen is how many bytes a text event's data carries, counted
// without decoding them: the string's length less what its escapes add.
func unquotedLen(data []byte) int {
	n := len(data) - 2
	for q := data; ; {
		i := bytes.IndexByte(q, '\\')
		if i < 0 || i+1 == len(q) {
			return n
		}
		if q[i+1] == 'u' {
			n -= 5
		} else {
			n--
		}
		q = q[i+2:]
	}
}

// bareShell runs script on a PTY of its own and returns the master, as
// pty.Open hands it out (blocking reads), and a cleanup.
func bareShell(b *testing.B, script string) (*os.File, func()) {
	b.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		b.Fatal(err)
	}
	p, err := bash(script)(tty)
	tty.Close()
	if err != nil {
		b.Fatal(err)
	}
	return master, func() {
		killSession(p.Pid())
		p.Wait()
		master.Close()
	}
}

// readUntil reads the master until it has seen marker.
func readUntil(b *testing.B, r io.Reader, marker string) {
	b.Helper()
	var got []byte
	buf := make([]byte, 64)
	for !bytes.Contains(got, []byte(marker)) {
		n, err := r.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
}

// textFile writes size bytes of lines of text.
func textFile(b *testing.B, size int) string {
	b.Helper()
	var line []byte
	var buf bytes.Buffer
	for i := 0; buf.Len() < size; i++ {
		line = fmt.Appendf(line[:0], "%08d the quick brown fox jumps over the lazy dog, again and again\n", i)
		buf.Write(line)
	}
	path := b.TempDir() + "/text"
	if err := os.WriteFile(path, buf.Bytes()[:size], 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// cpuTime is the CPU time of this process and its reaped children.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// BenchmarkThroughput: `cat` of a 256 MiB text file in raw mode, read
// straight from a PTY master (raw-MB/s), and through the ring and SSE to a
// Go client over loopback: one that decodes every event (MB/s) and one
// that only parses events and counts the bytes (parse-MB/s). The client
// shares the machine's CPUs with the server, which a browser does not.
// cpu-s is CPU time per run, shell and cat included.
func BenchmarkThroughput(b *testing.B) {
	path := textFile(b, throughputSize)
	benchThroughput(b, func(s string) Launcher { return bash(s) }, Options{}, path, path)
}

// BenchmarkThroughputJailed is BenchmarkThroughput with the terminal's
// shell started as a session's shell is: through the sandbox, in its
// jail, the file in its checkout. The floor is the same plain PTY.
func BenchmarkThroughputJailed(b *testing.B) {
	j := newJail(b)
	path := textFile(b, throughputSize)
	inside := filepath.Join(j.dir, "text")
	if err := os.Rename(path, inside); err != nil {
		b.Fatal(err)
	}
	benchThroughput(b, j.bash, Options{}, inside, "/workspace/text")
}

const throughputSize = 256 << 20

// benchThroughput times cat of the text file at floorPath on a bare PTY,
// and of the same file, at path as the shell sees it, in a terminal whose
// shell start starts.
func benchThroughput(b *testing.B, start func(string) Launcher, opts Options, floorPath, path string) {
	const size = throughputSize
	script := "stty raw -echo; printf R; head -c1 >/dev/null; cat "
	m := newManager(b, Config{})

	floor := func() time.Duration {
		master, done := bareShell(b, script+floorPath)
		defer done()
		readUntil(b, master, "R")
		buf := make([]byte, 64<<10)
		start := time.Now()
		master.Write([]byte("g"))
		total := 0
		for total < size {
			n, err := master.Read(buf)
			total += n
			if err != nil {
				b.Fatalf("raw read %d bytes: %v", total, err)
			}
		}
		return time.Since(start)
	}
	viaSSE := func(decode bool) time.Duration {
		term, err := m.Open("ann", start(script+path), opts)
		if err != nil {
			b.Fatal(err)
		}
		defer term.Close()
		srv := serve(b, term)
		defer srv.Close()
		res, err := srv.Client().Get(srv.URL + "/stream?from=0")
		if err != nil {
			b.Fatal(err)
		}
		defer res.Body.Close()
		r := newSSEReader(res.Body)
		if name, _, n, err := r.next(); err != nil || name != "text" || string(r.buf[:n]) != "R" {
			b.Fatalf("first event %s %q %v", name, r.buf[:n], err)
		}
		r.decode = decode
		start := time.Now()
		term.Input(1, []byte("g"))
		for total := 0; total < size; {
			name, _, n, err := r.next()
			if err != nil || name != "text" && name != "out" {
				b.Fatalf("after %d bytes: %s event, %v", total, name, err)
			}
			total += n
		}
		return time.Since(start)
	}

	var rawTime, sseTime, parseTime, rawCPU, sseCPU time.Duration
	for b.Loop() {
		c := cpuTime()
		rawTime += floor()
		rawCPU += cpuTime() - c
		c = cpuTime()
		sseTime += viaSSE(true)
		sseCPU += cpuTime() - c
		parseTime += viaSSE(false)
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * size / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(rawTime), "raw-MB/s")
	b.ReportMetric(mbps(sseTime), "MB/s")
	b.ReportMetric(mbps(parseTime), "parse-MB/s")
	b.ReportMetric(100*mbps(sseTime)/mbps(rawTime), "%-of-raw")
	b.ReportMetric(rawCPU.Seconds()/float64(b.N), "raw-cpu-s")
	b.ReportMetric(sseCPU.Seconds()/float64(b.N), "cpu-s")
}

// BenchmarkKeystroke: the round trip of one key, echoed by the line
// discipline: written to a PTY master and read back (raw-p50/p99), and
// through Input to the echoed byte decoded from the SSE stream (p50/p99).
func BenchmarkKeystroke(b *testing.B) {
	benchKeystroke(b, func(s string) Launcher { return bash(s) }, Options{})
}

// BenchmarkKeystrokeJailed is BenchmarkKeystroke with the terminal's shell
// started through the sandbox, as a session's shell is; the floor is the
// same plain PTY.
func BenchmarkKeystrokeJailed(b *testing.B) {
	j := newJail(b)
	benchKeystroke(b, j.bash, Options{})
}

func benchKeystroke(b *testing.B, start func(string) Launcher, opts Options) {
	const script = "stty -icanon; printf R; exec cat >/dev/null"
	master, done := bareShell(b, script)
	defer done()
	readUntil(b, master, "R")

	m := newManager(b, Config{})
	term, err := m.Open("ann", start(script), opts)
	if err != nil {
		b.Fatal(err)
	}
	srv := serve(b, term)
	res, err := srv.Client().Get(srv.URL + "/stream?from=0")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	r := newSSEReader(res.Body)
	for got := ""; got != "R"; {
		_, _, n, err := r.next()
		if err != nil {
			b.Fatal(err)
		}
		got += string(r.buf[:n])
	}

	var raw, ours []time.Duration
	key := []byte("x")
	echo := make([]byte, 16)
	seq := uint64(0)
	for b.Loop() {
		start := time.Now()
		master.Write(key)
		if n, err := master.Read(echo); err != nil || n != 1 || echo[0] != 'x' {
			b.Fatalf("raw echo %q, %v", echo[:n], err)
		}
		raw = append(raw, time.Since(start))

		seq++
		start = time.Now()
		if _, err := term.Input(seq, key); err != nil {
			b.Fatal(err)
		}
		if name, _, n, err := r.next(); err != nil || name != "text" || n != 1 || r.buf[0] != 'x' {
			b.Fatalf("echo event %s %q, %v", name, r.buf[:n], err)
		}
		ours = append(ours, time.Since(start))
	}
	ms := func(ds []time.Duration, q float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(q*float64(len(ds)-1))]) / 1e6
	}
	b.ReportMetric(ms(raw, 0.5), "raw-p50-ms")
	b.ReportMetric(ms(raw, 0.99), "raw-p99-ms")
	b.ReportMetric(ms(ours, 0.5), "p50-ms")
	b.ReportMetric(ms(ours, 0.99), "p99-ms")
}

// BenchmarkResume: a viewer resumes 1 MiB back and reads up to the newest
// byte (ms); the floor is 1 MiB from memory in a plain HTTP response
// (raw-ms). Neither reuses a connection.
func BenchmarkResume(b *testing.B) {
	const size = 1 << 20
	path, data := randomFile(b, size, 9)
	m := newManager(b, Config{})
	term, err := m.Open("ann", bash("stty raw -echo; head -c "+strconv.Itoa(size)+" "+path+"; exec sleep 600"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer term.Close()
	wait.For(b, wait.Long, "the file in the ring", func() bool { return term.Offset() >= size })
	srv := serve(b, term)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	}))
	defer plain.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()

	var rawTime, ourTime time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := client.Get(plain.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		rawTime += time.Since(start)
		if n != size {
			b.Fatalf("plain read %d", n)
		}

		start = time.Now()
		res, err = client.Get(srv.URL + "/stream?from=" + strconv.Itoa(int(term.Offset())-size))
		if err != nil {
			b.Fatal(err)
		}
		r := newSSEReader(res.Body)
		total := 0
		for total < size {
			name, _, n, err := r.next()
			if err != nil || name != "text" && name != "out" {
				b.Fatalf("after %d bytes: %s event, %v", total, name, err)
			}
			total += n
		}
		res.Body.Close()
		ourTime += time.Since(start)
	}
	b.ReportMetric(float64(rawTime.Microseconds())/1e3/float64(b.N), "raw-ms")
	b.ReportMetric(float64(ourTime.Microseconds())/1e3/float64(b.N), "ms")
}

// BenchmarkIdleMemory: heap and stack per idle terminal (a prompt printed,
// the shell waiting), against the same shells on bare PTYs.
func BenchmarkIdleMemory(b *testing.B) {
	const n = 32
	const script = "printf 'ann@box:~$ '; exec sleep 600"
	inUse := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse + ms.StackInuse)
	}
	var ours, floor int64
	for b.Loop() {
		before := inUse()
		var bare []func()
		var masters []*os.File
		for range n {
			master, done := bareShell(b, script)
			readUntil(b, master, "$ ")
			bare = append(bare, done)
			masters = append(masters, master)
		}
		floor += inUse() - before
		for _, done := range bare {
			done()
		}
		runtime.KeepAlive(masters)

		m := NewManager(Config{AccountShells: n})
		before = inUse()
		for range n {
			term, err := m.Open("ann", bash(script), Options{})
			if err != nil {
				b.Fatal(err)
			}
			wait.For(b, wait.Short, "the shell's first output", func() bool { return term.Offset() >= 11 })
		}
		ours += inUse() - before
		if err := m.Close(); err != nil && !errors.Is(err, ErrClosed) {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(floor)/float64(b.N*n), "raw-bytes/terminal")
	b.ReportMetric(float64(ours)/float64(b.N*n), "bytes/terminal")
}
