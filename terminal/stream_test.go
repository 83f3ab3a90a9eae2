package terminal

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"atelier/testrig/wait"
)

// ready reads output events until the shell has printed marker, which a
// raw mode script prints once its stty has run, and returns the offset
// after it.
func (s *stream) ready(marker string) uint64 {
	s.t.Helper()
	var got []byte
	for {
		e := s.next(5 * time.Second)
		if !e.isOutput() {
			s.t.Fatalf("waiting for %q: got %s event", marker, e.name)
		}
		got = append(got, e.bytes(s.t)...)
		if string(got) == marker {
			return e.offset(s.t)
		}
		if len(got) >= len(marker) {
			s.t.Fatalf("waiting for %q: got %q", marker, got)
		}
	}
}

// expectOutput reads output events until the output holds want.
func (s *stream) expectOutput(want string, wait time.Duration) string {
	s.t.Helper()
	var got []byte
	deadline := time.Now().Add(wait)
	for !bytes.Contains(got, []byte(want)) {
		e := s.next(time.Until(deadline))
		if e.isOutput() {
			got = append(got, e.bytes(s.t)...)
		}
	}
	return string(got)
}

// TestRawOutputArrivesByteForByte: 32 MiB of random bytes written in raw
// mode reach an SSE client unchanged (CR, LF, NUL and all), with event ids
// that are exact offsets.
func TestRawOutputArrivesByteForByte(t *testing.T) {
	const size = 32 << 20
	path, data := randomFile(t, size, 1)
	// What this test reads is every byte, not how long the server waits
	// for a stalled viewer: a reader starved past the usual 5 s on a
	// loaded machine (a CI run) would be dropped, and the test fail for it.
	m := newManager(t, Config{WriteTimeout: time.Minute})
	term := openShell(t, m, "stty raw -echo; printf R; head -c1 >/dev/null; head -c "+strconv.Itoa(size)+" "+path, Options{})
	srv := serve(t, term)
	s := dial(t, srv, "", "?from=0")
	from := s.ready("R")
	if _, err := term.Input(1, []byte("g")); err != nil {
		t.Fatal(err)
	}
	out, exit, gaps := s.collect(from, 30*time.Second)
	if gaps != 0 {
		t.Errorf("%d gap events for an attached viewer", gaps)
	}
	if len(out) != size || sha256.Sum256(out) != sha256.Sum256(data) {
		t.Fatalf("got %d bytes (sha256 %x), want %d (%x)", len(out), sha256.Sum256(out), size, sha256.Sum256(data))
	}
	if exit.offset(t) != from+size {
		t.Errorf("exit id %s, want %d", exit.id, from+size)
	}
}

// TestUTF8ArrivesWholeAsText: text whose characters the reads of
// EventBytes (and of the PTY) cut in two arrives as text events only, each
// of whole characters: the first bytes of a cut character wait for the
// next event.
func TestUTF8ArrivesWholeAsText(t *testing.T) {
	// 3-byte runes, shifted by one, read 1000 bytes at a time: not a
	// multiple of 3.
	const eventBytes = 1000
	text := "x" + strings.Repeat("€日本語✓ ", 40000)
	path := t.TempDir() + "/utf8"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Config{EventBytes: eventBytes})
	term := openShell(t, m, "stty raw -echo; printf R; head -c1 >/dev/null; cat "+path, Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	from := s.ready("R")
	term.Input(1, []byte("g"))

	var out []byte
	cut := 0 // events that left a cut character's first bytes behind
	for off := from; ; {
		e := s.next(10 * time.Second)
		if e.name == "exit" {
			break
		}
		if e.name != "text" {
			t.Fatalf("%s event %.40q at %d", e.name, e.data, off)
		}
		b := e.bytes(t)
		if !utf8.Valid(b) || !strings.HasPrefix(text[len(out):], string(b)) {
			t.Fatalf("event at %d: %d bytes, not the text from there", off, len(b))
		}
		if len(b) >= eventBytes-2 && len(b) < eventBytes {
			cut++
		}
		off += uint64(len(b))
		if e.offset(t) != off {
			t.Fatalf("id %s, want %d", e.id, off)
		}
		out = append(out, b...)
	}
	if cut == 0 {
		t.Fatal("no read cut a character: the test proves nothing")
	}
	if string(out) != text {
		t.Fatalf("text differs: got %d bytes, want %d", len(out), len(text))
	}
}

// TestReconnectResumesExactly drops the connection after a random number
// of events 100 times, resuming each time from the last id received, while
// the shell is still writing; the joined output equals the file.
func TestReconnectResumesExactly(t *testing.T) {
	const chunks, chunk = 64, 64 << 10
	path, data := randomFile(t, chunks*chunk, 2)
	m := newManager(t, Config{RingBytes: 2 * chunks * chunk, EventBytes: 4 << 10})
	script := "stty raw -echo; for i in $(seq 0 " + strconv.Itoa(chunks-1) + "); do " +
		"dd if=" + path + " bs=" + strconv.Itoa(chunk) + " skip=$i count=1 status=none; sleep 0.005; done"
	term := openShell(t, m, script, Options{})
	srv := serve(t, term)

	rnd := rand.New(rand.NewPCG(3, 4))
	var out []byte
	last := "0"
	exited := false
	for conn := 0; conn <= 100 || !exited; conn++ {
		if conn > 1000 {
			t.Fatal("output did not end")
		}
		s := dial(t, srv, last, "")
		for k := 1 + rnd.IntN(12); k > 0; k-- {
			e := s.next(10 * time.Second)
			if e.name == "exit" {
				exited = true
				break
			}
			if !e.isOutput() {
				t.Fatalf("connection %d: %s event %q", conn, e.name, e.data)
			}
			b := e.bytes(t)
			if want := uint64(len(out) + len(b)); e.offset(t) != want {
				t.Fatalf("connection %d: id %s, want %d", conn, e.id, want)
			}
			out = append(out, b...)
			last = e.id
		}
		s.close()
		if conn == 100 && exited {
			t.Log("the shell finished before the 100th reconnect")
		}
	}
	if !bytes.Equal(out, data) {
		t.Fatalf("joined output: %d bytes, want %d; equal prefix %d", len(out), len(data), commonPrefix(out, data))
	}
}

// TestResumeInsideABatch: output that piled up while nobody watched goes
// out in batches of EventBytes, each joining many PTY reads; a viewer that
// resumes from an offset inside a batch (a count of bytes it decoded, not
// an event id, and not on a base64 group) gets exactly the bytes from
// there, its first event starting at that very byte.
func TestResumeInsideABatch(t *testing.T) {
	const size, batch = 200 << 10, 64 << 10
	path, data := randomFile(t, size, 7)
	m := newManager(t, Config{EventBytes: batch})
	term := openShell(t, m, "stty raw -echo; printf R; cat "+path+"; head -c1 >/dev/null", Options{})
	wait.For(t, wait.Long, "the whole file in the ring", func() bool { return term.Offset() == 1+size })
	srv := serve(t, term)

	s := dial(t, srv, "", "?from=0")
	first := s.next(5 * time.Second)
	if b := first.bytes(t); first.name != "out" || len(b) != batch || b[0] != 'R' || !bytes.Equal(b[1:], data[:batch-1]) {
		t.Fatalf("first event %s of %d bytes, want the %d bytes written first, in one", first.name, len(b), batch)
	}
	s.close()

	const cut = batch/2 + 2 // inside the first batch, not a multiple of 3
	s = dial(t, srv, strconv.Itoa(cut), "")
	if e := s.next(5 * time.Second); e.name != "out" || !bytes.Equal(e.bytes(t), data[cut-1:cut-1+len(e.bytes(t))]) || e.offset(t) != uint64(cut+len(e.bytes(t))) {
		t.Fatalf("first event after resuming at %d: %s id %s, not the bytes from there", cut, e.name, e.id)
	} else {
		s.close()
	}
	s = dial(t, srv, strconv.Itoa(cut), "")
	if _, err := term.Input(1, []byte("q")); err != nil {
		t.Fatal(err)
	}
	out, exit, gaps := s.collect(cut, 10*time.Second)
	if gaps != 0 || !bytes.Equal(out, data[cut-1:]) || exit.offset(t) != 1+size {
		t.Fatalf("from %d: %d bytes, %d gaps, exit at %s; want the %d bytes from there", cut, len(out), gaps, exit.id, size+1-cut)
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestGapAfterRingWrapped: with nobody attached a flood overruns a small
// ring; a reconnect from an offset that left it first gets a gap event
// with the exact count, then the oldest bytes kept.
func TestGapAfterRingWrapped(t *testing.T) {
	const size, ringSize = 1 << 20, 64 << 10
	path, data := randomFile(t, size, 5)
	m := newManager(t, Config{RingBytes: ringSize})
	term := openShell(t, m, "stty raw -echo; head -c "+strconv.Itoa(size)+" "+path, Options{})
	<-term.Done()
	if term.Offset() != size || term.Oldest() != size-ringSize {
		t.Fatalf("ring holds [%d, %d), want [%d, %d)", term.Oldest(), term.Offset(), size-ringSize, size)
	}
	srv := serve(t, term)

	for _, tc := range []struct {
		name, lastID, query string
		wantGap             int
	}{
		{"from the start", "", "?from=0", size - ringSize},
		{"from a Last-Event-ID", "1000", "", size - ringSize - 1000},
		{"Last-Event-ID before from", "70000", "?from=0", size - ringSize - 70000},
		{"from the oldest kept byte", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dial(t, srv, tc.lastID, tc.query)
			from := uint64(size - ringSize)
			if tc.wantGap > 0 {
				e := s.next(5 * time.Second)
				if e.name != "gap" || e.data != strconv.Itoa(tc.wantGap) || e.offset(t) != from {
					t.Fatalf("first event %s %q id %s, want gap %d id %d", e.name, e.data, e.id, tc.wantGap, from)
				}
			}
			out, _, gaps := s.collect(from, 5*time.Second)
			if gaps != 0 {
				t.Errorf("%d more gaps", gaps)
			}
			if !bytes.Equal(out, data[from:]) {
				t.Errorf("after the gap: %d bytes, want the last %d of the output", len(out), ringSize)
			}
		})
	}

	for _, q := range []string{"?from=" + strconv.Itoa(size+1), "?from=x", "?from=-1"} {
		res, err := srv.Client().Get(srv.URL + "/stream" + q)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 400 {
			t.Errorf("%s: %s, want 400 (ErrBadOffset)", q, res.Status)
		}
	}
}

// TestHeartbeatAndHeaders: an idle stream gets beat events that say how
// often they come and the offset reached, and the response is set up for
// proxies.
func TestHeartbeatAndHeaders(t *testing.T) {
	m := newManager(t, Config{Heartbeat: 50 * time.Millisecond})
	term := openShell(t, m, "sleep 60", Options{})
	s := dial(t, serve(t, term), "", "")
	for k, want := range map[string]string{
		"Content-Type":      "text/event-stream",
		"Cache-Control":     "no-store",
		"X-Accel-Buffering": "no",
		"Content-Encoding":  "",
	} {
		if got := s.res.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	for range 2 {
		if e := s.next(2 * time.Second); e.name != "beat" || e.data != "50" || e.id != "0" {
			t.Fatalf("got %+v, want a beat at offset 0 saying 50 ms", e)
		}
	}
}

// TestSlowViewerPausesProducer: while an attached viewer does not read,
// `yes` blocks (the ring's offset stops), and it continues once the viewer
// reads again, after a pause of seconds; the viewer never sees a gap.
func TestSlowViewerPausesProducer(t *testing.T) {
	m := newManager(t, Config{WriteTimeout: time.Minute})
	term := openShell(t, m, "stty raw -echo; printf R; head -c1 >/dev/null; exec yes", Options{})
	// A tight viewer: a loose one's client holds events (MiBs) it has not
	// handed to the test, and when a loaded run starves its loop past the
	// stop it takes them later, draining the backlog the test watches.
	s := dialTight(t, serve(t, term), "?from=0")
	off := s.ready("R")
	term.Input(1, []byte("g"))

	// read checks n more bytes of "y\n" at their absolute offsets.
	read := func(n uint64) {
		t.Helper()
		for end := off + n; off < end; {
			e := s.next(10 * time.Second)
			if !e.isOutput() {
				t.Fatalf("%s event %q at %d", e.name, e.data, off)
			}
			for _, c := range e.bytes(t) {
				want := byte('\n') // "R" is at 0, so y at odd offsets
				if off%2 == 1 {
					want = 'y'
				}
				if c != want {
					t.Fatalf("byte %d is %q, want %q", off, c, want)
				}
				off++
			}
			if e.offset(t) != off {
				t.Fatalf("id %s, want %d", e.id, off)
			}
		}
	}
	read(4 << 20)
	// A slow reader: one event every 2 ms; the shell waits for it. The
	// pause is the reader's slowness, not a wait.
	for range 200 {
		read(1)
		time.Sleep(2 * time.Millisecond)
	}

	// Stop reading: the server's writes fill the socket, its backlog
	// passes the high-water mark, and the reader stops.
	var stopped uint64
	wait.For(t, wait.Long, "the producer to stop", func() bool {
		// Not a wait: stopped means not moving for a while, and the
		// while is what this measures.
		a := term.Offset()
		time.Sleep(200 * time.Millisecond)
		stopped = term.Offset()
		return a == stopped
	})
	term.out.mu.Lock()
	paused := term.out.paused
	term.out.mu.Unlock()
	if !paused {
		t.Fatal("offset stopped but the reader is not paused")
	}
	// Not a wait: the viewer stays silent, and the producer must stay
	// stopped all that while.
	time.Sleep(2 * time.Second)
	if now := term.Offset(); now != stopped {
		t.Fatalf("offset moved from %d to %d while the viewer did not read", stopped, now)
	}

	// Read again: everything up to the stop and well past it, with no gap.
	read(stopped - off + 8<<20)
	if term.Offset() <= stopped+4<<20 {
		t.Fatalf("offset %d: the producer did not resume after %d", term.Offset(), stopped)
	}
}

// TestStalledViewerIsDropped: a viewer whose write stalls past the write
// timeout is dropped, and the shell's output flows again without it.
func TestStalledViewerIsDropped(t *testing.T) {
	m := newManager(t, Config{WriteTimeout: 300 * time.Millisecond})
	term := openShell(t, m, "stty raw -echo; printf R; head -c1 >/dev/null; exec yes", Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	s.ready("R")
	term.Input(1, []byte("g")) // and never read again
	wait.For(t, wait.Long, "the producer to stop", func() bool {
		term.out.mu.Lock()
		defer term.out.mu.Unlock()
		return term.out.paused
	})
	stopped := term.Offset()
	wait.For(t, wait.Long, "the stalled viewer to be dropped", func() bool {
		return term.Viewers() == 0
	})
	wait.For(t, wait.Long, "output to flow again", func() bool { return term.Offset() > stopped+4<<20 })
}

// TestLaggingViewerIsDroppedWithResync: of two viewers, one stops reading
// (its write stalls, yet well within the write timeout). The other sets
// the pace: it gets 32 MiB of `yes` without waiting, far past what the
// ring keeps. When the stopped one reads again, it gets what it had been
// sent, then resync at the offset it had reached, and its stream ends.
//
// The pace is the viewer furthest ahead's, so the flood starts only once
// the reading viewer is ahead of the stopped one and that one's write has
// stalled: output comes in chunks smaller than the ring until then. (With
// the flood at once, a loaded machine could run the stopped viewer ahead
// before its socket filled, and the reading one fell off the ring.)
func TestLaggingViewerIsDroppedWithResync(t *testing.T) {
	const chunk = 256 << 10
	m := newManager(t, Config{WriteTimeout: time.Minute})
	term := openShell(t, m, fmt.Sprintf(`stty raw -echo; printf R; while [ "$(head -c1)" = g ]; do head -c %d /dev/zero | tr '\0' y; done; exec yes`, chunk), Options{})
	if chunk >= term.cfg.RingBytes {
		t.Fatalf("a chunk of %d bytes must be less than the ring's %d", chunk, term.cfg.RingBytes)
	}
	srv := serve(t, term)
	fast := dial(t, srv, "", "?from=0")
	slow := dialTight(t, srv, "?from=0")
	off := fast.ready("R")
	slow.ready("R")

	readTo := func(end uint64) {
		for off < end {
			e := fast.next(5 * time.Second)
			if !e.isOutput() {
				t.Fatalf("the reading viewer got %s at %d", e.name, off)
			}
			off = e.offset(t)
		}
	}
	seq := uint64(1)
	for stalled := false; !stalled; seq++ {
		if seq > 64 {
			t.Fatalf("the stopped viewer still reads after %d chunks", seq-1)
		}
		term.Input(seq, []byte("g"))
		readTo(off + chunk)
		// Not a wait: stalled means the stopped viewer's stream stays
		// behind the end for a while, and the while is what this checks.
		behind := term.out.leastSeen()
		time.Sleep(200 * time.Millisecond)
		stalled = behind < off && term.out.leastSeen() == behind
	}
	term.Input(seq, []byte("y"))
	readTo(off + 32<<20)

	var reached uint64
	for {
		e := slow.next(10 * time.Second)
		if e.name == "resync" {
			reached = e.offset(t)
			break
		}
		if !e.isOutput() {
			t.Fatalf("the stopped viewer got %s before resync", e.name)
		}
		reached = e.offset(t)
	}
	if reached >= off-uint64(term.cfg.RingBytes) {
		t.Fatalf("resync at %d, but the other viewer was at %d with a ring of %d", reached, off, term.cfg.RingBytes)
	}
	if _, ok := <-slow.events; ok {
		t.Fatal("the stream went on after resync")
	}
	wait.For(t, wait.Short, "the dropped viewer to detach", func() bool { return term.Viewers() == 1 })
}

// leastSeen is how far the viewer furthest behind has read the ring.
func (o *Output) leastSeen() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	least := o.ring.end
	for v := range o.viewers {
		least = min(least, v.seen)
	}
	return least
}

// TestFloodWithoutViewerStaysInRing: nobody attached, so output keeps
// flowing and old bytes drop; memory stays near the ring's size.
func TestFloodWithoutViewerStaysInRing(t *testing.T) {
	const ringSize = 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	m := newManager(t, Config{RingBytes: ringSize})
	term := openShell(t, m, "stty raw -echo; exec yes", Options{})
	wait.For(t, wait.Long, "64 MiB of output", func() bool { return term.Offset() > 64<<20 })
	runtime.GC()
	runtime.ReadMemStats(&after)

	if got := term.Offset() - term.Oldest(); got != ringSize {
		t.Errorf("ring keeps %d bytes, want %d", got, ringSize)
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 4*ringSize {
		t.Errorf("heap in use grew by %d bytes during a flood into a %d-byte ring", grew, ringSize)
	}
}

// exitOf decodes an exit event.
func exitOf(t *testing.T, e event) Exit {
	t.Helper()
	var x Exit
	if e.name != "exit" {
		t.Fatalf("%s event, want exit", e.name)
	}
	if err := json.Unmarshal([]byte(e.data), &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestExitEventCarriesCode: after the shell's `exit 3`, a viewer that
// attaches gets all of the output, then the exit event with code 3; a
// reconnect from the final id gets the exit event alone.
func TestExitEventCarriesCode(t *testing.T) {
	m := newManager(t, Config{})
	term := openShell(t, m, "printf 'bye\\n'; exit 3", Options{})
	select {
	case <-term.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after exit")
	}
	if st, ok := term.ExitStatus(); !ok || st != (Exit{Code: 3}) {
		t.Errorf("ExitStatus %+v %v", st, ok)
	}
	srv := serve(t, term)
	out, exit, _ := dial(t, srv, "", "?from=0").collect(0, 5*time.Second)
	if string(out) != "bye\r\n" {
		t.Errorf("output %q, want %q", out, "bye\r\n")
	}
	if x := exitOf(t, exit); x != (Exit{Code: 3}) {
		t.Errorf("exit %+v, want code 3", x)
	}
	if exit.offset(t) != uint64(len(out)) {
		t.Errorf("exit id %s, want %d", exit.id, len(out))
	}
	if x := exitOf(t, dial(t, srv, exit.id, "").next(5*time.Second)); x.Code != 3 {
		t.Errorf("exit after reconnect: %+v", x)
	}
}

// TestViewersPerTerminalAreBounded: past Config.Viewers a stream is refused
// with 429 before a byte is written, and a viewer that leaves frees its
// place for the next.
func TestViewersPerTerminalAreBounded(t *testing.T) {
	m := newManager(t, Config{Viewers: 3})
	term := openShell(t, m, "sleep 60", Options{})
	srv := serve(t, term)
	var open []*stream
	for range 3 {
		open = append(open, dial(t, srv, "", ""))
	}
	res, err := srv.Client().Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Content-Type") == "text/event-stream" {
		t.Fatalf("fourth viewer: %s %q (%s), want 429 before streaming", res.Status, body, res.Header.Get("Content-Type"))
	}
	open[0].close()
	wait.For(t, wait.Short, "a closed viewer to give up its place", func() bool { return term.Viewers() < 3 })
	dial(t, srv, "", "")
}
