package terminal

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"atelier/testrig/wait"
)

// kinds reads output events until exit and returns them, joining nothing.
func (s *stream) kinds(wait time.Duration) []event {
	s.t.Helper()
	var es []event
	for {
		e := s.next(wait)
		if e.name == "exit" {
			return es
		}
		if !e.isOutput() {
			s.t.Fatalf("%s event %q among the output", e.name, e.data)
		}
		es = append(es, e)
	}
}

// TestOutputGoesAsTextOrOut: what a writer wrote, once it has ended,
// reaches a viewer as text events for runs of UTF-8 whose JSON is no
// longer than their base64, out events for the rest, each with the
// offset after its bytes as id.
func TestOutputGoesAsTextOrOut(t *testing.T) {
	_, random := randomFile(t, 4<<10, 11)
	e, euro := strings.Repeat("é", 100), strings.Repeat("€", 100)
	source := "// Package main says hello, in a few languages: 日本語, français.\n" +
		"package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"a \\\"quoted\\\" string\", 'x', `raw`, \"\\n\")\r\n}\n"
	controls := strings.Repeat("a line of text long enough to carry its controls", 4) + "\b\f\x00\x01\x1f\x7f <>&\u2028 \ufffd"
	for _, tc := range []struct {
		name  string
		write string
		want  []string // kind and bytes, in turn
	}{
		{"a keystroke's echo", "x", []string{"text", "x"}},
		{"source code", source, []string{"text", source}},
		{"binary", string(random), []string{"out", string(random)}},
		{"escape sequences", strings.Repeat("\x1b[1;31mA\x1b[0m", 50), []string{"out", strings.Repeat("\x1b[1;31mA\x1b[0m", 50)}},
		{"a line feed", "\r\n", []string{"out", "\r\n"}},
		{"short text among bytes that are not UTF-8", "é\xff€\n", []string{"out", "é\xff€\n"}},
		{"long text among bytes that are not UTF-8", e + "\xff" + euro, []string{"text", e, "out", "\xff", "text", euro}},
		{"a character cut short, then text", "\xe2\x82" + strings.Repeat("a", 300), []string{"out", "\xe2\x82", "text", strings.Repeat("a", 300)}},
		{"an encoded surrogate", "\xed\xa0\x80", []string{"out", "\xed\xa0\x80"}},
		{"control characters, <, U+2028 and U+FFFD in text", controls, []string{"text", controls}},
		{"a character cut by the end of the output", e + "\xe2\x82", []string{"text", e, "out", "\xe2\x82"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t, Config{})
			o := m.NewOutput()
			o.Write([]byte(tc.write))
			o.End(Exit{})
			var got []string
			off := 0
			for _, e := range dial(t, serveOutput(t, o), "", "?from=0").kinds(5 * time.Second) {
				b := e.bytes(t)
				off += len(b)
				if e.offset(t) != uint64(off) {
					t.Errorf("%s event of %d bytes has id %s, want %d", e.name, len(b), e.id, off)
				}
				if e.name == "text" && (!utf8.ValidString(e.data) || len(e.data) > base64Len(len(b))) {
					t.Errorf("text event %.40q: not UTF-8, or longer than base64", e.data)
				}
				got = append(got, e.name, string(b))
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("events %.300q,\nwant %.300q", got, tc.want)
			}
		})
	}
}

// TestCutCharacterWaitsForTheRest: a character whose first bytes come in
// one write and the rest in the next arrives whole in one text event, the
// text before it at once; nothing about it is sent in between.
func TestCutCharacterWaitsForTheRest(t *testing.T) {
	m := newManager(t, Config{})
	o := m.NewOutput()
	s := dial(t, serveOutput(t, o), "", "?from=0")
	o.Write([]byte("price: \xe2\x82"))
	if e := s.next(5 * time.Second); e.name != "text" || string(e.bytes(t)) != "price: " || e.id != "7" {
		t.Fatalf("first event %s %q id %s, want the text before the cut character", e.name, e.data, e.id)
	}
	o.Write([]byte("\xac 3, and a little more\n"))
	if e := s.next(5 * time.Second); e.name != "text" || string(e.bytes(t)) != "€ 3, and a little more\n" || e.id != "32" {
		t.Fatalf("then %s %q id %s, want the whole character and what follows", e.name, e.data, e.id)
	}
}

// TestCutCharacterBetweenPTYReads: the same through a shell, whose two
// halves of a character the reader gets in two reads of the PTY. The
// water marks of a byte make the reader wait for the viewer after every
// read: it must not wait for the bytes the viewer holds back, which wait
// for it.
func TestCutCharacterBetweenPTYReads(t *testing.T) {
	m := newManager(t, Config{HighWater: 1, LowWater: 1})
	term := openShell(t, m, `stty raw -echo; printf 'R\342\202'; head -c1 >/dev/null; printf '\254!'`, Options{})
	s := dial(t, serve(t, term), "", "?from=0")
	if e := s.next(5 * time.Second); e.name != "text" || string(e.bytes(t)) != "R" || e.id != "1" {
		t.Fatalf("first event %s %q id %s, want R", e.name, e.data, e.id)
	}
	wait.For(t, wait.Short, "the first half of the character in the ring", func() bool { return term.Offset() == 3 })
	if _, err := term.Input(1, []byte("g")); err != nil {
		t.Fatal(err)
	}
	if e := s.next(5 * time.Second); e.name != "text" || string(e.bytes(t)) != "€!" || e.id != "5" {
		t.Fatalf("then %s %q id %s, want €! whole", e.name, e.data, e.id)
	}
}

// mixedOutput is n bytes of output as a session gives it: lines of text
// with accents and escape sequences, and blocks of binary bytes, cut at
// random into writes, some inside a character.
func mixedOutput(t testing.TB, n int, seed uint64) [][]byte {
	t.Helper()
	_, random := randomFile(t, n, seed)
	var all []byte
	for i := 0; len(all) < n; i++ {
		switch r := random[i%len(random)]; {
		case r < 10:
			k := 1 + int(r)*40
			all = append(all, random[(i*7)%(n/2):][:k]...)
		case r < 80:
			all = fmt.Appendf(all, "\x1b[1;3%dmerror\x1b[0m: line %d\r\n", r%8, i)
		default:
			all = fmt.Appendf(all, "%06d\tcafé «naïve» 日本語 — “quoted” %s\r\n", i, strings.Repeat("€", int(r)%20))
		}
	}
	all = all[:n]
	var writes [][]byte
	for i := 0; len(all) > 0; i++ {
		k := min(len(all), 1+int(random[i%len(random)])*13)
		writes = append(writes, all[:k])
		all = all[k:]
	}
	return writes
}

// TestResumeAtEveryID: a viewer that resumes at the id of any event, text
// or out, gets exactly the output from there: nothing lost, nothing twice.
func TestResumeAtEveryID(t *testing.T) {
	m := newManager(t, Config{EventBytes: 2 << 10})
	o := m.NewOutput()
	var all []byte
	for _, w := range mixedOutput(t, 96<<10, 13) {
		o.Write(w)
		all = append(all, w...)
	}
	o.End(Exit{})
	srv := serveOutput(t, o)
	events := dial(t, srv, "", "?from=0").kinds(5 * time.Second)
	after := map[string]int{}
	for i, e := range events {
		if i == len(events)-1 {
			break
		}
		after[e.name]++
		from := e.offset(t)
		out, exit, gaps := dial(t, srv, e.id, "").collect(from, 5*time.Second)
		if gaps != 0 || !bytes.Equal(out, all[from:]) || exit.offset(t) != uint64(len(all)) {
			t.Fatalf("resumed after %s event %d (id %d): %d bytes, %d gaps; want the %d from there", e.name, i, from, len(out), gaps, len(all)-int(from))
		}
	}
	if after["text"] < 10 || after["out"] < 10 {
		t.Fatalf("resumed after %d text and %d out events: the output does not mix them enough", after["text"], after["out"])
	}
}

// FuzzAppendOutput: whatever the bytes, the events appendOutput makes are
// well-formed SSE (one line of data each), their ids count the bytes, a
// text event is a JSON string of valid UTF-8 no longer than base64, no two
// out events are neighbours, valid UTF-8 is one event, and decoding them all gives back exactly the
// bytes they carry: all of p, or with hold all but the first bytes of a
// character p's end cuts. And valid UTF-8 as JSON is as long as reckoned.
func FuzzAppendOutput(f *testing.F) {
	for _, s := range []string{"", "x", "é\xff€\n", "abc\xe2\x82", "\xe2\x82\xac", "\xf0\x9f\x98", "\xed\xa0\x80", "\x1b[0m\r\n",
		"\"\\\b\f\n\r\t\x00\x7f", strings.Repeat("é", 100) + "\xff" + strings.Repeat("€", 100) + "\xf0\x9f"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, p []byte, hold bool) {
		const off = 1 << 40
		b, n := appendOutput([]byte("before"), off, p, hold)
		if !bytes.HasPrefix(b, []byte("before")) {
			t.Fatal("appendOutput changed what was in the buffer")
		}
		if rest := p[n:]; hold && len(rest) > 0 && utf8.FullRune(rest) || !hold && len(rest) > 0 {
			t.Fatalf("left %q of %q unsent (hold %v)", rest, p, hold)
		}
		var got []byte
		last := ""
		for _, ev := range strings.SplitAfter(string(b[len("before"):]), "\n\n") {
			if ev == "" {
				continue
			}
			lines := strings.Split(strings.TrimSuffix(ev, "\n\n"), "\n")
			if len(lines) != 3 || strings.ContainsRune(ev, '\r') {
				t.Fatalf("event %q is not three lines", ev)
			}
			name, _ := strings.CutPrefix(lines[0], "event: ")
			id, _ := strings.CutPrefix(lines[1], "id: ")
			data, ok := strings.CutPrefix(lines[2], "data: ")
			if !ok {
				t.Fatalf("event %q has no data", ev)
			}
			var carried []byte
			switch name {
			case "text":
				var s string
				if err := json.Unmarshal([]byte(data), &s); err != nil || !utf8.ValidString(data) || s == "" {
					t.Fatalf("text data %q: %v", data, err)
				}
				if len(data) > base64Len(len(s)) {
					t.Fatalf("text data %q is longer than base64 of it", data)
				}
				carried = []byte(s)
			case "out":
				if last == "out" {
					t.Fatalf("two out events in a row in %q", b)
				}
				d, err := base64.StdEncoding.DecodeString(data)
				if err != nil || len(d) == 0 {
					t.Fatalf("out data %q: %v", data, err)
				}
				carried = d
			default:
				t.Fatalf("%q event", name)
			}
			got = append(got, carried...)
			if id != strconv.FormatUint(off+uint64(len(got)), 10) {
				t.Fatalf("%s event of %q has id %s, want %d", name, carried, id, off+uint64(len(got)))
			}
			last = name
		}
		if !bytes.Equal(got, p[:n]) {
			t.Fatalf("events carry %q, want %q", got, p[:n])
		}
		if events := bytes.Count(b, []byte("\n\n")); utf8.Valid(p) && len(p) > 0 && events != 1 {
			t.Fatalf("valid UTF-8 %q went as %d events", p, events)
		}
		// The size appendOutput reckons with is what appendJSONString
		// writes, and encoding/json reads it back.
		if utf8.Valid(p) {
			q := appendJSONString(nil, p)
			cost := 2
			for _, c := range p {
				if c < utf8.RuneSelf {
					cost += int(jsonCost[c])
				} else {
					cost++
				}
			}
			var s string
			if err := json.Unmarshal(q, &s); err != nil || s != string(p) || len(q) != cost {
				t.Fatalf("%q as JSON: %s (%d bytes, reckoned %d): %v", p, q, len(q), cost, err)
			}
		}
	})
}

// sourceCode is Go source: this package's, about 68 KB of it.
func sourceCode(b *testing.B) []byte {
	var source []byte
	for _, name := range []string{"stream.go", "output.go", "ring.go", "terminal.go", "manager.go", "input.go", "text.go", "stream_test.go"} {
		f, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		source = append(source, f...)
	}
	return source
}

// BenchmarkOutputEvents: the events a viewer is sent for output read in
// EventBytes chunks, as text where it pays (appendOutput) against all as
// base64 (what the stream sent before it had text events): for Go source
// code (this package's) and for binary output (the test binary). MB/s is
// of output encoded; wire-bytes/B is how many bytes of events each byte
// of output costs.
func BenchmarkOutputEvents(b *testing.B) {
	source := sourceCode(b)
	binary, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		b.Fatal(err)
	}
	binary = binary[:1<<20]
	chunk := Config{}.withDefaults().EventBytes
	for _, in := range []struct {
		name string
		data []byte
	}{{"source", source}, {"binary", binary}} {
		for _, enc := range []struct {
			name string
			add  func(b []byte, off uint64, p []byte) []byte
		}{
			{"text", func(b []byte, off uint64, p []byte) []byte { b, _ = appendOutput(b, off, p, false); return b }},
			{"base64", func(b []byte, off uint64, p []byte) []byte { return appendOut(b, off+uint64(len(p)), p) }},
		} {
			b.Run(in.name+"/"+enc.name, func(b *testing.B) {
				b.SetBytes(int64(len(in.data)))
				b.ReportAllocs()
				buf := make([]byte, 0, 2*chunk)
				wire := 0
				for b.Loop() {
					wire = 0
					for off := 0; off < len(in.data); off += chunk {
						buf = enc.add(buf[:0], uint64(off), in.data[off:min(off+chunk, len(in.data))])
						wire += len(buf)
					}
				}
				b.ReportMetric(float64(wire)/float64(len(in.data)), "wire-bytes/B")
			})
		}
	}
}

// BenchmarkDecodeEvents: what a Go client spends decoding the data of the
// events BenchmarkOutputEvents measures: a text event's JSON string, with
// encoding/json or AppendText, against an out event's base64. MB/s is
// of output decoded.
func BenchmarkDecodeEvents(b *testing.B) {
	source := sourceCode(b)
	text := source[:32<<10]
	for !utf8.Valid(text) {
		text = text[:len(text)-1]
	}
	jsonData := appendJSONString(nil, text)
	b64Data := base64.StdEncoding.AppendEncode(nil, text)
	b.Run("text-json", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			var s string
			if err := json.Unmarshal(jsonData, &s); err != nil || len(s) != len(text) {
				b.Fatal(err)
			}
		}
	})
	b.Run("text-unquote", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		dst := make([]byte, 0, len(text))
		for b.Loop() {
			d, err := AppendText(dst[:0], jsonData)
			if err != nil || len(d) != len(text) {
				b.Fatal(err)
			}
		}
	})
	b.Run("base64", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		dst := make([]byte, len(text))
		for b.Loop() {
			if n, err := base64.StdEncoding.Decode(dst, b64Data); err != nil || n != len(text) {
				b.Fatal(err)
			}
		}
	})
}
