package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// A consumer that reads exactly size bytes and stops, as an HTTP request
// with a Content-Length does, must never get all of them from a reader that
// is too long or too short: that is what keeps S3 from storing an object
// whose size was wrong.
func TestExactReaderHoldsBackTheEnd(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10_000)
	tests := []struct {
		name string
		have int   // bytes the reader has
		size int64 // bytes it is said to have
		ok   bool
	}{
		{"Exact", 100_000, 100_000, true},
		{"ExactOne", 1, 1, true},
		{"ExactEmpty", 0, 0, true},
		{"LongByOne", 100_000, 99_999, false},
		{"LongEmpty", 1, 0, false},
		{"ShortByOne", 99_999, 100_000, false},
		{"ShortEmpty", 0, 1, false},
	}
	wrap := map[string]func(io.Reader) io.Reader{
		"plain":    func(r io.Reader) io.Reader { return r },
		"onebyte":  iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"dataeof":  iotest.DataErrReader,
		"zeroread": func(r io.Reader) io.Reader { return &zeroReader{r: r} },
	}
	for _, tt := range tests {
		for wname, w := range wrap {
			t.Run(tt.name+"/"+wname, func(t *testing.T) {
				e := newExactReader(context.Background(), w(bytes.NewReader(data[:tt.have])), tt.size)
				// The consumer: reads until it has size bytes or an error.
				var got bytes.Buffer
				_, err := io.Copy(&got, io.LimitReader(e, tt.size))
				if err == nil && int64(got.Len()) == tt.size {
					// It has all it wanted; it still reads on to EOF
					// (as io.Copy to a file does), which reports the
					// end.
					_, err = io.Copy(&got, e)
				}
				switch {
				case tt.ok && err != nil:
					t.Fatalf("error %v, want none", err)
				case tt.ok && !bytes.Equal(got.Bytes(), data[:tt.have]):
					t.Fatalf("passed on %d bytes, want %d", got.Len(), tt.have)
				case tt.ok && !e.done:
					t.Fatal("not done after the whole reader")
				case !tt.ok && !errors.Is(err, ErrSizeMismatch):
					t.Fatalf("error %v, want ErrSizeMismatch", err)
				case !tt.ok && int64(got.Len()) >= tt.size && tt.size > 0:
					t.Fatalf("passed on %d bytes of a wrong-sized reader said to have %d", got.Len(), tt.size)
				case !tt.ok && e.done:
					t.Fatal("done on a wrong-sized reader")
				}
				// The error sticks.
				if _, err2 := e.Read(make([]byte, 10)); !tt.ok && !errors.Is(err2, ErrSizeMismatch) {
					t.Errorf("read after the error: %v", err2)
				}
			})
		}
	}
}

// zeroReader returns 0, nil before each read that has data.
type zeroReader struct {
	r    io.Reader
	skip bool
}

func (z *zeroReader) Read(p []byte) (int, error) {
	z.skip = !z.skip
	if z.skip {
		return 0, nil
	}
	return z.r.Read(p)
}

func TestExactReaderStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e := newExactReader(ctx, bytes.NewReader(make([]byte, 1000)), 1000)
	if n, err := e.Read(make([]byte, 10)); n != 10 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, e); !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v, want context.Canceled", err)
	}
}
