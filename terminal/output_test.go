package terminal

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"atelier/testrig/wait"
)

// serveOutput serves an Output's stream as serve does a terminal's.
func serveOutput(t testing.TB, o *Output) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := o.ServeStream(w, r); err != nil {
			http.Error(w, err.Error(), statusOf(err))
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// TestOutputStreamsToTheEnd: what a writer wrote before and after viewers
// attach reaches each of them exactly from where it asked, then End's
// data as the exit event; a viewer that comes after the end gets the kept
// bytes and the same exit.
func TestOutputStreamsToTheEnd(t *testing.T) {
	m := newManager(t, Config{})
	o := m.NewOutput()
	srv := serveOutput(t, o)
	var all bytes.Buffer
	write := func(s string) {
		o.Write([]byte(s))
		all.WriteString(s)
	}
	write("first line\n")
	whole := dial(t, srv, "", "")
	if got := whole.expectOutput("first line\n", 5*time.Second); got != "first line\n" {
		t.Fatalf("a viewer from the oldest byte got %q", got)
	}
	later := dial(t, srv, "", "?from=6")
	resumed := dial(t, srv, "6", "") // Last-Event-ID, as a browser resumes
	for i := range 100 {
		write("line " + strconv.Itoa(i) + "\n")
	}
	o.End(map[string]any{"code": 3, "notes": []string{"a.txt changed"}})
	o.Write([]byte("after the end")) // dropped

	out, exit, gaps := whole.collect(uint64(len("first line\n")), 5*time.Second)
	if gaps != 0 || "first line\n"+string(out) != all.String() {
		t.Fatalf("from the start: %d gaps, %q", gaps, out)
	}
	if exit.data != `{"code":3,"notes":["a.txt changed"]}` || exit.offset(t) != uint64(all.Len()) {
		t.Fatalf("exit event %+v, want End's data at offset %d", exit, all.Len())
	}
	for _, s := range []*stream{later, resumed} {
		if out, _, _ := s.collect(6, 5*time.Second); string(out) != all.String()[6:] {
			t.Fatalf("from offset 6: %q", out)
		}
	}
	after := dial(t, srv, "", "?from=0")
	if out, e, _ := after.collect(0, 5*time.Second); string(out) != all.String() || e.data != exit.data {
		t.Fatalf("after the end: %q, exit %q", out, e.data)
	}
	if o.Offset() != uint64(all.Len()) {
		t.Fatalf("offset %d after the end, want %d", o.Offset(), all.Len())
	}
}

// TestOutputWriterNeverWaits: a viewer that reads nothing never holds an
// unpaced writer (a command's pipes run on the command's own clock); once
// the bytes it needs leave the ring it is sent resync, and a new viewer
// from its offset is told the gap.
func TestOutputWriterNeverWaits(t *testing.T) {
	m := newManager(t, Config{RingBytes: 64 << 10})
	o := m.NewOutput()
	srv := serveOutput(t, o)
	stalled := dialTight(t, srv, "?from=0")
	wait.For(t, wait.Short, "the viewer to attach", func() bool { return o.Viewers() == 1 })

	chunk := bytes.Repeat([]byte("y\n"), 16<<10)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for range 256 { // 8 MiB, 128 rings
			o.Write(chunk)
		}
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer waited for a viewer that reads nothing")
	}
	o.End(Exit{Code: 0})
	for e := stalled.next(10 * time.Second); e.name != "resync"; e = stalled.next(10 * time.Second) {
		if e.name == "exit" {
			t.Fatal("a viewer that fell a ring behind got the exit, not resync")
		}
	}
	again := dial(t, srv, "", "?from=0")
	e := again.next(5 * time.Second)
	if e.name != "gap" || e.data != strconv.Itoa(8<<20-64<<10) {
		t.Fatalf("a viewer from 0 after 8 MiB through a 64 KiB ring got %s %q", e.name, e.data)
	}
	if out, exit, _ := again.collect(e.offset(t), 5*time.Second); len(out) != 64<<10 || exit.data != `{"code":0,"signal":""}` {
		t.Fatalf("then %d bytes and exit %q", len(out), exit.data)
	}
}
