//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

func plain(t *testing.T, ctx context.Context, script string, lim sandbox.Limits) (*sandbox.Result, error) {
	t.Helper()
	return sandbox.RunPlain(ctx, bash(script), t.TempDir(), []string{"PATH=/usr/bin:/bin"}, lim)
}

func runError(t *testing.T, err error, kind sandbox.ErrKind) *sandbox.RunError {
	t.Helper()
	var re *sandbox.RunError
	if !errors.As(err, &re) || re.Kind != kind {
		t.Fatalf("err = %v, want a RunError of kind %s", err, kind)
	}
	return re
}

func TestRunnerCompletes(t *testing.T) {
	res, err := plain(t, context.Background(), "echo out; echo err >&2; exit 3", sandbox.Limits{})
	if err != nil {
		t.Fatalf("a non-zero exit is a Result: %v", err)
	}
	if res.ExitCode != 3 || res.Signal != "" || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.TimedOut {
		t.Errorf("result %+v", res)
	}

	res, err = plain(t, context.Background(), "echo before; kill -SEGV $$", sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != -1 || res.Signal != "segmentation fault" || string(res.Stdout) != "before\n" {
		t.Errorf("killed by a signal: %+v", res)
	}

	// stdin is /dev/null: cat ends at once.
	res, err = plain(t, context.Background(), "cat; echo done", sandbox.Limits{Timeout: 5 * time.Second})
	if err != nil || string(res.Stdout) != "done\n" {
		t.Errorf("stdin: %+v, %v", res, err)
	}

	// env is the whole environment; nil is an empty one.
	res, err = sandbox.RunPlain(context.Background(), []string{"/usr/bin/env"}, "/", nil, sandbox.Limits{})
	if err != nil || len(res.Stdout) != 0 {
		t.Errorf("nil env: %q, %v", res.Stdout, err)
	}
}

func TestRunnerTimeout(t *testing.T) {
	start := time.Now()
	_, err := plain(t, context.Background(), "echo partial; sleep 30", sandbox.Limits{Timeout: 500 * time.Millisecond})
	re := runError(t, err, sandbox.Timeout)
	if !errors.Is(err, sandbox.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sandbox.ErrCanceled) {
		t.Errorf("errors.Is: %v", err)
	}
	if string(re.Partial.Stdout) != "partial\n" || re.Partial.ExitCode != -1 || re.Partial.Signal != "terminated" {
		t.Errorf("partial %+v", re.Partial)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s", took)
	}

	// With TimeoutExit, the same is a Result.
	res, err := plain(t, context.Background(), "echo partial; sleep 30", sandbox.Limits{Timeout: 500 * time.Millisecond, TimeoutExit: 124})
	if err != nil || res.ExitCode != 124 || !res.TimedOut || string(res.Stdout) != "partial\n" {
		t.Errorf("TimeoutExit: %+v, %v", res, err)
	}
}

func TestRunnerCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := plain(t, ctx, "echo partial; sleep 30", sandbox.Limits{Timeout: 20 * time.Second})
	re := runError(t, err, sandbox.Canceled)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sandbox.ErrCanceled) || errors.Is(err, sandbox.ErrTimeout) {
		t.Errorf("errors.Is: %v", err)
	}
	if string(re.Partial.Stdout) != "partial\n" || re.Partial.ExitCode != -1 {
		t.Errorf("partial %+v", re.Partial)
	}

	// A context that has ended already starts nothing.
	_, err = plain(t, ctx, "echo started", sandbox.Limits{})
	if re := runError(t, err, sandbox.Canceled); len(re.Partial.Stdout) != 0 {
		t.Errorf("started anyway: %q", re.Partial.Stdout)
	}
}

func TestRunnerOverflow(t *testing.T) {
	start := time.Now()
	_, err := plain(t, context.Background(), "head -c 100000 /dev/zero | tr '\\0' x; sleep 30", sandbox.Limits{MaxStream: 1000})
	re := runError(t, err, sandbox.Overflow)
	if !errors.Is(err, sandbox.ErrOverflow) {
		t.Errorf("errors.Is: %v", err)
	}
	if string(re.Partial.Stdout) != strings.Repeat("x", 1000) || !re.Partial.StdoutTruncated || re.Partial.ExitCode != -1 {
		t.Errorf("partial: %d bytes, %+v", len(re.Partial.Stdout), re.Partial.StdoutTruncated)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("an overflow did not stop the command: took %s", took)
	}

	_, err = plain(t, context.Background(), "head -c 1000 /dev/zero | tr '\\0' o; head -c 1000 /dev/zero | tr '\\0' e >&2",
		sandbox.Limits{MaxCombined: 1500})
	re = runError(t, err, sandbox.Overflow)
	// Both pipes are read at once, so which stream reached the bound first
	// is the scheduler's choice; together they stop at it.
	if n := len(re.Partial.Stdout) + len(re.Partial.Stderr); n != 1500 || len(re.Partial.Stdout) > 1000 || len(re.Partial.Stderr) > 1000 {
		t.Errorf("combined: kept %d + %d", len(re.Partial.Stdout), len(re.Partial.Stderr))
	}

	// Within the limits, no overflow.
	res, err := plain(t, context.Background(), "head -c 1000 /dev/zero", sandbox.Limits{MaxStream: 1000})
	if err != nil || len(res.Stdout) != 1000 || res.StdoutTruncated {
		t.Errorf("exactly at the limit: %v", err)
	}
}

func TestRunnerTailKeepsValidUTF8(t *testing.T) {
	// 65535 "é" (2 bytes each) and a newline: the last 64 KiB start on the
	// second byte of an "é", which must go.
	res, err := plain(t, context.Background(), "printf 'é%.0s' $(seq 65535); echo",
		sandbox.Limits{MaxStream: 64 << 10, Tail: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.StdoutTruncated || !utf8.Valid(res.Stdout) || len(res.Stdout) != 64<<10-1 ||
		string(res.Stdout) != strings.Repeat("é", 32767)+"\n" {
		t.Errorf("tail: %d bytes, valid %v, truncated %v, starts %q", len(res.Stdout), utf8.Valid(res.Stdout),
			res.StdoutTruncated, res.Stdout[:min(4, len(res.Stdout))])
	}
}

func TestRunnerStartFailure(t *testing.T) {
	_, err := sandbox.RunPlain(context.Background(), []string{"/nonexistent/tool"}, "/", nil, sandbox.Limits{})
	runError(t, err, sandbox.Start)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, sandbox.ErrStart) {
		t.Errorf("err = %v", err)
	}

	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	for _, argv := range [][]string{{"/nonexistent/tool"}, {"no-such-tool-anywhere"}} {
		spec := s.spec("")
		spec.Argv = argv
		_, err := sb.Run(context.Background(), spec, sandbox.Limits{})
		runError(t, err, sandbox.Start)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: err = %v", argv, err)
		}
	}
	// A folder the user may not enter.
	spec := s.spec("true")
	spec.Dir = filepath.Join(openDir(t), "private")
	spec.Workspace = spec.Dir
	if err := os.Mkdir(spec.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Run(context.Background(), spec, sandbox.Limits{})
	runError(t, err, sandbox.Start)
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("a root folder: err = %v", err)
	}
}

func TestRunnerBackgroundChildHoldingStdout(t *testing.T) {
	start := time.Now()
	res, err := plain(t, context.Background(), "sleep 999 & echo $!", sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s", took)
	}
	pid := strings.TrimSpace(string(res.Stdout))
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if !wait.Until(wait.Short, func() bool {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		return err != nil || bytes.Contains(st, []byte(") Z "))
	}) {
		t.Errorf("the background sleep %s lives on", pid)
	}
}

func TestRunnerStdin(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	spec := s.spec("cat; echo")
	spec.Stdin = strings.NewReader("from stdin")
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{})
	if err != nil || string(res.Stdout) != "from stdin\n" {
		t.Errorf("%+v, %v", res, err)
	}
}

// TestOutputFlood sends 1 GiB down each stream of a sandboxed command and
// checks that exactly the last 64 KiB of each is kept, with bounded memory.
func TestOutputFlood(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	const tail = 64 << 10

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
		}
	}()
	res, err := sb.Run(context.Background(), s.spec(`
		{ head -c 1073741824 /dev/zero | tr '\0' a; printf END-OUT; } &
		{ head -c 1073741824 /dev/zero | tr '\0' b; printf END-ERR; } >&2
		wait`), sandbox.Limits{Timeout: 120 * time.Second, MaxStream: tail, Tail: true})
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	wantOut := strings.Repeat("a", tail-7) + "END-OUT"
	wantErr := strings.Repeat("b", tail-7) + "END-ERR"
	if string(res.Stdout) != wantOut || !res.StdoutTruncated {
		t.Errorf("stdout: %d bytes, truncated %v, ends %q", len(res.Stdout), res.StdoutTruncated, res.Stdout[max(0, len(res.Stdout)-10):])
	}
	if string(res.Stderr) != wantErr || !res.StderrTruncated {
		t.Errorf("stderr: %d bytes, truncated %v, ends %q", len(res.Stderr), res.StderrTruncated, res.Stderr[max(0, len(res.Stderr)-10):])
	}
	const bound = 64 << 20
	allocated := after.TotalAlloc - before.TotalAlloc
	grew := int64(peak) - int64(before.HeapInuse)
	t.Logf("2 GiB in %s; allocated %d KiB, heap in use grew at most %d KiB", res.Duration, allocated>>10, grew>>10)
	if allocated > bound || grew > bound {
		t.Errorf("memory: allocated %d, heap grew %d; want both under %d", allocated, grew, bound)
	}
}
