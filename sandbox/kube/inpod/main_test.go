package inpod

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// helperEnv makes the test binary the helper itself, so that run's tests
// start it as the pod does: a process of its own, whose subreaper flag
// and kills touch nothing of the tests.
const helperEnv = "INPOD_TEST_HELPER"

func TestMain(m *testing.M) {
	if n := os.Getenv(floodEnv); n != "" {
		os.Exit(flood(n))
	}
	if os.Getenv(helperEnv) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// frames is what a verb wrote, read back through a FrameReader.
type frames struct {
	stdout, stderr   bytes.Buffer // the first keepOutput bytes of each
	stdoutN, stderrN int64
	entries          []Entry
	content          map[string][]byte // by the path of the entry before
	known            []string          // the payloads of FrameKnown: lines of the known section
	answers          map[string]Entry  // changes' answers to AskRead, by path
	asks             int               // FrameAsk frames
	need             string            // changes' FrameSections: the sections it asked for
	outBytes         int64             // changes' output, all of it
	status           []byte
}

const keepOutput = 1 << 20

func readFrames(t *testing.T, r io.Reader) *frames {
	t.Helper()
	f := &frames{content: map[string][]byte{}}
	fr := NewFrameReader(r, MaxChunk+64<<10)
	last := ""
	for {
		kind, p, err := fr.Next()
		if errors.Is(err, io.EOF) {
			return f
		}
		if err != nil {
			t.Fatalf("read frames: %v", err)
		}
		if f.status != nil {
			t.Fatalf("frame %q after the status", kind)
		}
		switch kind {
		case FrameStdout:
			f.stdoutN += int64(len(p))
			if f.stdout.Len() < keepOutput {
				f.stdout.Write(p)
			}
		case FrameStderr:
			f.stderrN += int64(len(p))
			if f.stderr.Len() < keepOutput {
				f.stderr.Write(p)
			}
		case FrameEntry:
			var e Entry
			if err := json.Unmarshal(p, &e); err != nil {
				t.Fatalf("entry %q: %v", p, err)
			}
			f.entries = append(f.entries, e)
			last = e.Path
		case FrameContent:
			f.content[last] = append(f.content[last], p...)
		case FrameKnown:
			f.known = append(f.known, string(p))
		case FrameAsk:
			f.asks++
		case FrameStatus:
			f.status = bytes.Clone(p)
		default:
			t.Fatalf("unknown frame kind %q", kind)
		}
	}
}

func (f *frames) decodeStatus(t *testing.T, v any) {
	t.Helper()
	if f.status == nil {
		t.Fatal("no status frame")
	}
	if err := json.Unmarshal(f.status, v); err != nil {
		t.Fatalf("status %q: %v", f.status, err)
	}
}
