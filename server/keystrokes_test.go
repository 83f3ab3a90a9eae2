package server

import (
	"context"
	"io"
	"net/http"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeystrokeEchoes types into a shell's terminal over HTTP as the page
// does, one key at a time, each once the previous one's echo has come
// back over the stream: every key comes back once and in order, and the
// round trips' p50 and p99 are logged. Each key is a trace task, so that
//
//	go test -run TestKeystrokeEchoes -trace keys.trace ./server
//
// records where the slowest keys spend their time (README, Performance).
func TestKeystrokeEchoes(t *testing.T) {
	needRoot(t)
	keystrokeEchoes(t, newHarness(t))
}

func TestKeystrokeEchoesInAPod(t *testing.T) {
	needRoot(t)
	keystrokeEchoes(t, newHarness(t, onKube(t)))
}

func keystrokeEchoes(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open a terminal: %d %s", res.StatusCode, readBody(res))
	}
	ctx := context.Background()
	echoes := &echoReader{t: t, events: owner.follow(t, base+"/terminals/"+term.ID+"/stream?from=0", "")}

	seq := term.NextSeq
	send := func(keys string) {
		t.Helper()
		res := owner.input(base, term.ID, seq, keys)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("input %d: %d %s", seq, res.StatusCode, readBody(res))
		}
		// Read to its end, so that the connection is kept for the next.
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		seq++
	}
	// The line discipline echoes what cat is given, key by key (-icanon),
	// and cat prints nothing. READY comes once the terminal is set so:
	// the echo of the line itself says REA''DY.
	send("stty echo -icanon; printf 'REA''DY\\n'; exec cat >/dev/null\n")
	var seen strings.Builder
	for !strings.HasSuffix(seen.String(), "READY\r\n") {
		seen.WriteByte(echoes.next())
	}

	const keys = 2000
	took := make([]time.Duration, 0, keys)
	for i := range keys {
		key := byte('a' + i%26)
		tctx, task := trace.NewTask(ctx, "keystroke")
		start := time.Now()
		trace.WithRegion(tctx, "post", func() { send(string(key)) })
		var got byte
		trace.WithRegion(tctx, "echo", func() { got = echoes.next() })
		took = append(took, time.Since(start))
		task.End()
		if got != key {
			t.Fatalf("key %d: typed %q, the stream echoed %q", i, key, got)
		}
	}
	slices.Sort(took)
	t.Logf("%d keys over HTTP, each echoed once and in order: p50 %v, p99 %v, max %v",
		keys, took[keys/2], took[keys*99/100], took[keys-1])
}

// echoReader reads a terminal's output from its stream's events, byte by
// byte.
type echoReader struct {
	t       *testing.T
	events  <-chan sseEvent
	pending []byte
}

// next is the next byte of output, within 10 s.
func (r *echoReader) next() byte {
	r.t.Helper()
	for len(r.pending) == 0 {
		select {
		case e, ok := <-r.events:
			if !ok {
				r.t.Fatal("the stream ended")
			}
			b, _, err := outputOf(e.name, e.data)
			if err != nil {
				r.t.Fatal(err)
			}
			r.pending = b
		case <-time.After(10 * time.Second):
			r.t.Fatal("no output within 10 s")
		}
	}
	b := r.pending[0]
	r.pending = r.pending[1:]
	return b
}
