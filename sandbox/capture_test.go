package sandbox

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRingKeepsTheLastBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, max := range []int{1, 7, 4096, 65536} {
		var all []byte
		g := ring{max: max}
		for range 300 {
			chunk := make([]byte, r.IntN(3*max/2+2))
			for i := range chunk {
				chunk[i] = byte(r.IntN(256))
			}
			all = append(all, chunk...)
			g.write(chunk)
			want := all[len(all)-min(len(all), max):]
			if got := g.bytes(); !bytes.Equal(got, want) {
				t.Fatalf("max %d after %d bytes: kept %d bytes, not the last %d", max, len(all), len(got), len(want))
			}
			if cap(g.buf) > max {
				t.Fatalf("max %d: buffer grew to %d", max, cap(g.buf))
			}
		}
	}
}

func TestTailCutKeepsUTF8(t *testing.T) {
	for _, tc := range []struct {
		text     string
		max      int
		wantLen  int
		wantTrun bool
	}{
		{strings.Repeat("é", 10) + "\n", 8, 7, true},   // starts on an é's 2nd byte: 1 dropped
		{strings.Repeat("€", 10), 8, 6, true},          // starts on a €'s 2nd byte: 2 dropped
		{strings.Repeat("€", 10) + "\n", 8, 7, true},   // starts on a €'s 3rd byte: 1 dropped
		{strings.Repeat("€", 10) + "\n\n", 8, 8, true}, // starts on a first byte
		{"€", 8, 3, false},                             // nothing cut
		{"a\x80\x80\x80\x80b", 5, 2, true},             // at most 3 dropped
	} {
		c := newCapture(Limits{MaxStream: int64(tc.max), Tail: true}.WithDefaults(), nil)
		c.write(&c.out, []byte(tc.text))
		var r Result
		c.fill(&r)
		if len(r.Stdout) != tc.wantLen || r.StdoutTruncated != tc.wantTrun {
			t.Errorf("%q max %d: kept %q (truncated %v), want %d bytes", tc.text, tc.max, r.Stdout, r.StdoutTruncated, tc.wantLen)
		}
		if utf8.ValidString(tc.text) && !utf8.Valid(r.Stdout) {
			t.Errorf("%q: %q is not valid UTF-8", tc.text, r.Stdout)
		}
	}
}

func TestTailSharesACombinedLimit(t *testing.T) {
	for _, tc := range []struct {
		out, err         int
		wantOut, wantErr int
	}{
		{10, 100, 10, 90},
		{100, 10, 90, 10},
		{100, 100, 50, 50},
		{30, 40, 30, 40},
	} {
		c := newCapture(Limits{MaxCombined: 100, Tail: true}.WithDefaults(), nil)
		c.write(&c.out, bytes.Repeat([]byte("o"), tc.out))
		c.write(&c.err, bytes.Repeat([]byte("e"), tc.err))
		var r Result
		c.fill(&r)
		if len(r.Stdout) != tc.wantOut || len(r.Stderr) != tc.wantErr {
			t.Errorf("%d+%d: kept %d+%d, want %d+%d", tc.out, tc.err, len(r.Stdout), len(r.Stderr), tc.wantOut, tc.wantErr)
		}
		if r.StdoutTruncated != (tc.wantOut < tc.out) || r.StderrTruncated != (tc.wantErr < tc.err) {
			t.Errorf("%d+%d: truncated %v %v", tc.out, tc.err, r.StdoutTruncated, r.StderrTruncated)
		}
	}
}
