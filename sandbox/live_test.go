//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atelier/sandbox"
)

// liveOutput is a Spec.Output that remembers what it was given and says
// when it first held want.
type liveOutput struct {
	want string
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	once sync.Once
}

func (l *liveOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if strings.Contains(l.buf.String(), l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return len(p), nil
}

// A jailed command's output reaches Spec.Output as it is written, long
// before the command ends, stdout and stderr alike, in a helper started
// ahead or a fresh one; the Result's tails keep the two apart as before.
func TestOutputArrivesWhileTheCommandRuns(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	for _, withSpare := range []bool{false, true} {
		live := &liveOutput{want: "one\n", seen: make(chan struct{})}
		spec := s.spec("echo one; sleep 2; echo two >&2; echo three")
		spec.Output = live
		if withSpare {
			spare, err := sb.Spare(s.uid)
			if err != nil {
				t.Fatal(err)
			}
			spec.Spare = spare
		}
		var ended atomic.Bool
		type answer struct {
			res *sandbox.Result
			err error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
			ended.Store(true)
			done <- answer{res, err}
		}()
		select {
		case <-live.seen:
			if ended.Load() {
				t.Fatalf("spare %v: the first line came only once the command had ended", withSpare)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("spare %v: the first line never came while the command ran", withSpare)
		}
		a := <-done
		if a.err != nil {
			t.Fatal(a.err)
		}
		if got := live.buf.String(); got != "one\ntwo\nthree\n" && got != "one\nthree\ntwo\n" {
			t.Fatalf("spare %v: live output %q", withSpare, got)
		}
		if string(a.res.Stdout) != "one\nthree\n" || string(a.res.Stderr) != "two\n" {
			t.Fatalf("spare %v: tails %q %q", withSpare, a.res.Stdout, a.res.Stderr)
		}
	}
}
