package inpod

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	want := []struct {
		kind byte
		p    string
	}{{FrameStdout, "hello"}, {FrameStderr, ""}, {FrameStatus, `{"exit":0}`}}
	for _, w := range want {
		if err := WriteFrame(&buf, w.kind, []byte(w.p)); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(&buf, 16)
	for _, w := range want {
		kind, p, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if kind != w.kind || string(p) != w.p {
			t.Errorf("got %q %q, want %q %q", kind, p, w.kind, w.p)
		}
	}
	if _, _, err := fr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFrameReaderRefusesHostileLength(t *testing.T) {
	hdr := []byte{FrameStdout, 0xff, 0xff, 0xff, 0xff} // 4 GiB
	fr := NewFrameReader(bytes.NewReader(hdr), MaxChunk)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := fr.Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("got %v, want ErrFrameTooLarge", err)
	}
	if cap(fr.buf) != 0 {
		t.Errorf("buffer of %d bytes allocated for a refused frame", cap(fr.buf))
	}
	// The error message is all that may be allocated.
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("%d bytes allocated for a refused frame", n)
	}
}

func TestFrameReaderTruncated(t *testing.T) {
	var whole bytes.Buffer
	if err := WriteFrame(&whole, FrameStdout, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 4, 5, 10} {
		fr := NewFrameReader(bytes.NewReader(whole.Bytes()[:n]), 64)
		if _, _, err := fr.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

func TestFrameReaderReusesBuffer(t *testing.T) {
	var buf bytes.Buffer
	for range 4 { // one, then AllocsPerRun's warm-up and two runs
		if err := WriteFrame(&buf, FrameStdout, bytes.Repeat([]byte("x"), 100)); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(&buf, 100)
	if _, _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(2, func() {
		if _, _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame after the first", allocs)
	}
}
