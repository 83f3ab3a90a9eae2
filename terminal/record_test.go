package terminal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// castEvent is one event line of an asciicast v2 file.
type castEvent struct {
	at   float64
	code string
	data string
}

// parseCast checks that cast is asciicast v2 (a header object, then
// [time, code, data] arrays in time order) and returns its parts.
func parseCast(t *testing.T, cast []byte) (map[string]any, []castEvent) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(cast))
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatal("no header")
	}
	var header map[string]any
	if err := json.Unmarshal(sc.Bytes(), &header); err != nil {
		t.Fatalf("header %q: %v", sc.Text(), err)
	}
	if header["version"] != 2.0 {
		t.Fatalf("header %v: not version 2", header)
	}
	var events []castEvent
	last := 0.0
	for sc.Scan() {
		var raw []any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil || len(raw) != 3 {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		at, ok1 := raw[0].(float64)
		code, ok2 := raw[1].(string)
		data, ok3 := raw[2].(string)
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("event %q is not [time, code, data]", sc.Text())
		}
		if at < last {
			t.Fatalf("event %q comes before the one it follows (%f)", sc.Text(), last)
		}
		last = at
		events = append(events, castEvent{at, code, data})
	}
	return header, events
}

// TestRecordingIsAsciicast: a recording of echo lines, a resize and a
// character a read cut in two is a valid asciicast v2 file whose output
// events replay the same text; every viewer hears it start and stop.
func TestRecordingIsAsciicast(t *testing.T) {
	m := newManager(t, Config{})
	term := openShell(t, m, "stty -echo; printf R; read -r _; echo one; printf '\\342\\202'; sleep 0.2; printf '\\254\\n'; read -r _; echo two; read -r _", Options{Cols: 90, Rows: 30})
	s := dial(t, serve(t, term), "", "?from=0")
	s.expectOutput("R", 5*time.Second)

	rec, err := term.Record(1<<20, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := term.Record(1<<20, "again"); !errors.Is(err, ErrRecording) {
		t.Fatalf("a second recording at once: %v", err)
	}
	if e := s.next(5 * time.Second); e.name != "rec" || e.data != "on" {
		t.Fatalf("the viewer heard %s %q, want rec on", e.name, e.data)
	}
	term.Input(1, []byte("\n"))
	s.expectOutput("€\r\n", 5*time.Second)
	if err := term.Resize(100, 40); err != nil {
		t.Fatal(err)
	}
	term.Input(2, []byte("\n"))
	s.expectOutput("two\r\n", 5*time.Second)
	if _, err := term.StopRecording(); err != nil {
		t.Fatal(err)
	}
	if e := s.next(5 * time.Second); e.name != "rec" || e.data != "off" {
		t.Fatalf("the viewer heard %s %q, want rec off", e.name, e.data)
	}
	select {
	case <-rec.Done():
	default:
		t.Fatal("a stopped recording is not done")
	}
	if _, err := term.StopRecording(); !errors.Is(err, ErrNotRecording) {
		t.Fatalf("stopping twice: %v", err)
	}

	header, events := parseCast(t, rec.Cast())
	if header["width"] != 90.0 || header["height"] != 30.0 || header["title"] != "demo" {
		t.Fatalf("header %v", header)
	}
	var text strings.Builder
	var resizes []string
	for _, e := range events {
		switch e.code {
		case "o":
			text.WriteString(e.data)
		case "r":
			resizes = append(resizes, e.data)
		}
	}
	if text.String() != "one\r\n€\r\ntwo\r\n" {
		t.Fatalf("the recording replays %q", text.String())
	}
	if len(resizes) != 1 || resizes[0] != "100x40" {
		t.Fatalf("resizes %v", resizes)
	}
	if rec.Truncated() {
		t.Fatal("a small recording says it was truncated")
	}
}

// TestRecordingStopsAtItsBound: output past the bound ends the recording
// with a note inside the bound, and the viewers hear it stop.
func TestRecordingStopsAtItsBound(t *testing.T) {
	m := newManager(t, Config{})
	term := openShell(t, m, "stty -echo; printf R; read -r _; head -c 100000 /dev/zero | tr '\\0' x; echo; read -r _", Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	s.expectOutput("R", 5*time.Second)
	rec, err := term.Record(MinRecordingBytes, "")
	if err != nil {
		t.Fatal(err)
	}
	term.Input(1, []byte("\n"))
	select {
	case <-rec.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the recording did not stop at its bound")
	}
	cast := rec.Cast()
	if len(cast) > MinRecordingBytes || !rec.Truncated() {
		t.Fatalf("%d bytes, truncated %v; the bound is %d", len(cast), rec.Truncated(), MinRecordingBytes)
	}
	_, events := parseCast(t, cast)
	if last := events[len(events)-1]; last.code != "m" || last.data != FullNote {
		t.Fatalf("the last event %+v is not the note", last)
	}
	for e := s.next(5 * time.Second); e.name != "rec" || e.data != "off"; e = s.next(5 * time.Second) {
	}
	if term.rec.Load() != nil {
		t.Fatal("a full recording is still under way")
	}
	if _, err := term.Record(MinRecordingBytes, ""); err != nil {
		t.Fatalf("a new recording after a full one: %v", err)
	}
}

// Events reach the recording in the order they took its lock, each with
// the time read before it: a later event first, an earlier one after,
// still make a cast whose times never go back.
func TestRecordingTimesNeverGoBack(t *testing.T) {
	start := time.Now()
	r := newRecording(1<<20, 80, 24, "", start)
	r.resize(100, 30, start.Add(300*time.Millisecond))
	r.output([]byte("late\r\n"), start.Add(200*time.Millisecond))
	r.output([]byte("later\r\n"), start.Add(400*time.Millisecond))
	_, events := parseCast(t, r.Cast())
	want := []float64{0.3, 0.3, 0.4}
	if len(events) != len(want) {
		t.Fatalf("events %+v", events)
	}
	for i, e := range events {
		if e.at != want[i] {
			t.Fatalf("event %d at %v, want %v: %+v", i, e.at, want[i], events)
		}
	}
}
