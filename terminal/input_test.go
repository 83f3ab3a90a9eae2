package terminal

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atelier/testrig/wait"
)

// TestInputQueueOrder checks the queue alone: out-of-order numbers wait
// for the gap, repeats are dropped, and the limits hold.
func TestInputQueueOrder(t *testing.T) {
	q := newInputQueue(10, nil)
	steps := []struct {
		seq        uint64
		data       string
		wantQueued int
		wantErr    error
	}{
		{3, "c", 1, nil},                 // held: 1 and 2 are missing
		{3, "Z", 1, nil},                 // a repeat of a held one
		{1, "a", 2, nil},                 // applies 1; 2 still missing
		{2, "b", 3, nil},                 // applies 2 and the held 3
		{2, "X", 3, nil},                 // a repeat of an applied one
		{0, "?", 0, ErrBadSeq},           // numbers start at 1
		{4, "defghijk", 3, ErrInputFull}, // 3 + 8 > 10
		{4, "defghij", 10, nil},
		{5, "", 10, nil},
		{6, "01234567890", 0, ErrInputTooLarge},
	}
	for _, s := range steps {
		got, err := q.add(s.seq, []byte(s.data))
		if got != s.wantQueued || !errors.Is(err, s.wantErr) {
			t.Fatalf("add(%d, %q) = %d, %v; want %d, %v", s.seq, s.data, got, err, s.wantQueued, s.wantErr)
		}
	}
	if q.next != 6 {
		t.Errorf("next %d, want 6", q.next)
	}
	var w bytes.Buffer
	q.mu.Lock()
	q.closed = false
	q.mu.Unlock()
	go func() {
		wait.For(t, wait.Short, "the writer", func() bool { return q.length() == 0 })
		q.close()
	}()
	q.writeTo(&w)
	if w.String() != "abcdefghij" {
		t.Errorf("written %q, want %q", w.String(), "abcdefghij")
	}

	// Many inputs ahead of a gap are refused before they pile up.
	q = newInputQueue(1<<20, nil)
	for i := range maxHeld {
		if _, err := q.add(uint64(i+2), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.add(maxHeld+2, []byte("x")); !errors.Is(err, ErrInputFull) {
		t.Errorf("input %d ahead of a gap: %v, want ErrInputFull", maxHeld+1, err)
	}
	if _, err := q.add(1, []byte("x")); err != nil {
		t.Errorf("filling the gap: %v", err)
	}
	if q.next != maxHeld+2 {
		t.Errorf("next %d after filling the gap, want %d", q.next, maxHeld+2)
	}
}

// TestInputAppliedInOrder: on a real shell, inputs 3, 1, 2 arrive as "abc"
// and a repeated 2 is ignored.
func TestInputAppliedInOrder(t *testing.T) {
	m := newManager(t, Config{})
	term := openShell(t, m, "stty raw -echo; printf R; head -c 4; printf E", Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	from := s.ready("R")
	for _, in := range []struct {
		seq  uint64
		data string
	}{{3, "c"}, {1, "a"}, {2, "b"}, {2, "X"}, {4, "d"}} {
		if _, err := term.Input(in.seq, []byte(in.data)); err != nil {
			t.Fatal(err)
		}
	}
	out, _, _ := s.collect(from, 5*time.Second)
	if string(out) != "abcdE" {
		t.Fatalf("the shell read %q, want %q", out, "abcdE")
	}
	if _, err := term.Input(5, []byte("e")); !errors.Is(err, ErrClosed) {
		t.Errorf("input after the end: %v, want ErrClosed", err)
	}
}

// TestPasteArrivesWhole: 1 MiB of random bytes posted through ServeInput
// reaches a raw-mode shell whole.
func TestPasteArrivesWhole(t *testing.T) {
	_, paste := randomFile(t, 1<<20, 7)
	file := t.TempDir() + "/pasted"
	m := newManager(t, Config{})
	term := openShell(t, m, "stty raw -echo; printf R; head -c "+strconv.Itoa(len(paste))+" > "+file+"; printf D", Options{})
	srv := serve(t, term)
	s := dial(t, srv, "", "?from=0")
	s.ready("R")

	post := func(seq string, body []byte) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/input", bytes.NewReader(body))
		if seq != "" {
			req.Header.Set("X-Input-Seq", seq)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	for _, seq := range []string{"", "0", "x"} {
		if res := post(seq, []byte("q")); res.StatusCode != 400 {
			t.Errorf("X-Input-Seq %q: %s, want 400", seq, res.Status)
		}
	}
	res := post("1", paste)
	var got inputResult
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil || res.StatusCode != 200 {
		t.Fatalf("%s, %v", res.Status, err)
	}
	if got.Queued > len(paste) || got.Next != 2 {
		t.Errorf("answer %+v: want queued ≤ %d and next 2", got, len(paste))
	}
	s.expectOutput("D", 10*time.Second)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(b) != sha256.Sum256(paste) {
		t.Fatalf("the shell got %d bytes (equal prefix %d), want the %d pasted", len(b), commonPrefix(b, paste), len(paste))
	}
}

// TestInputFull: a shell that does not read lets the queue fill; then
// ErrInputFull, and Close still ends the writer stuck on the PTY.
func TestInputFull(t *testing.T) {
	m := newManager(t, Config{InputBytes: 2 << 20})
	term := openShell(t, m, "stty raw -echo; printf R; exec sleep 60", Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	s.ready("R")
	mib := make([]byte, 1<<20)
	for seq := uint64(1); seq <= 2; seq++ {
		if _, err := term.Input(seq, mib); err != nil {
			t.Fatalf("input %d: %v", seq, err)
		}
	}
	q, err := term.Input(3, mib)
	if !errors.Is(err, ErrInputFull) {
		t.Fatalf("third MiB: %v, want ErrInputFull", err)
	}
	if q < 3<<19 || q != term.QueuedInput() {
		t.Errorf("queued %d (QueuedInput %d): the PTY cannot have taken half a MiB", q, term.QueuedInput())
	}
	closed := make(chan error)
	go func() { closed <- term.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs with input stuck on the PTY")
	}
}

// lockedBuffer is what the PTY received, written by the queue's writer and
// by add's own attempts.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestInputQueueWritesAheadOfItsWriter: inputs arriving at once, out of
// order, into a queue whose own attempts take at most a few bytes (a PTY
// that is nearly full) reach the PTY whole and in sequence order, shared
// between add's attempts and the writer.
func TestInputQueueWritesAheadOfItsWriter(t *testing.T) {
	var got lockedBuffer
	var tries atomic.Int64
	q := newInputQueue(1<<20, func(p []byte) int {
		tries.Add(1)
		// Not a wait: a slow PTY, so that add's attempts and the
		// writer's meet.
		time.Sleep(50 * time.Microsecond)
		n, _ := got.Write(p[:min(len(p), 3)])
		return n
	})
	written := make(chan struct{})
	go func() {
		defer close(written)
		q.writeTo(&got)
	}()

	const inputs = maxHeld - 1
	var want strings.Builder
	for i := 1; i <= inputs; i++ {
		fmt.Fprintf(&want, "<%d>", i)
	}
	var adds sync.WaitGroup
	for _, i := range rand.Perm(inputs) {
		adds.Go(func() {
			if _, err := q.add(uint64(i+1), fmt.Appendf(nil, "<%d>", i+1)); err != nil {
				t.Error(err)
			}
		})
	}
	adds.Wait()
	wait.For(t, wait.Short, "the queue to drain", func() bool { return q.length() == 0 })
	q.close()
	<-written
	if got.String() != want.String() {
		t.Fatalf("the PTY got\n%s\nwant\n%s", got.String(), want.String())
	}
	if tries.Load() == 0 {
		t.Fatal("no input was written ahead of the writer")
	}
}
