//go:build linux

package inpod

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runHelper runs `sandbox-pod run args...` as a process of its own and
// returns its frames and its status.
func runHelper(t *testing.T, args ...string) (*frames, RunStatus, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"run"}, args...)...)
	// A race-enabled binary otherwise sleeps a second at exit.
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := readFrames(t, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v, stderr %q", err, stderr.String())
	}
	elapsed := time.Since(start)
	var st RunStatus
	f.decodeStatus(t, &st)
	return f, st, elapsed
}

func TestRunExitAndStreams(t *testing.T) {
	f, st, _ := runHelper(t, "-root", t.TempDir(), "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if st.Exit != 3 || st.Signal != "" || st.TimedOut || st.Overflow {
		t.Errorf("status %+v, want exit 3", st)
	}
	if f.stdout.String() != "out\n" || f.stderr.String() != "err\n" {
		t.Errorf("stdout %q, stderr %q", f.stdout.String(), f.stderr.String())
	}
}

func TestRunInFolder(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(root+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	f, st, _ := runHelper(t, "-root", root, "-dir", "sub", "--", "pwd")
	if st.Exit != 0 || f.stdout.String() != root+"/sub\n" {
		t.Errorf("status %+v, stdout %q", st, f.stdout.String())
	}
}

func TestRunRefusesFolderOutside(t *testing.T) {
	for _, dir := range []string{"../x", "a/../../x", "/etc"} {
		var out, errb bytes.Buffer
		if code := Main([]string{"run", "-root", t.TempDir(), "-dir", dir, "--", "true"}, nil, &out, &errb); code == 0 {
			t.Errorf("-dir %s: exit 0", dir)
		}
		if out.Len() != 0 {
			t.Errorf("-dir %s: wrote %q", dir, out.String())
		}
	}
}

func TestRunStartFailure(t *testing.T) {
	_, st, _ := runHelper(t, "-root", t.TempDir(), "--", "/no/such/program")
	if st.Error == "" || st.Exit != -1 {
		t.Errorf("status %+v, want an error", st)
	}
}

const bigOutput = 64 << 20

func TestRunLargeOutputArrivesWhole(t *testing.T) {
	f, st, _ := runHelper(t, "-root", t.TempDir(), "--", "head", "-c", strconv.Itoa(bigOutput), "/dev/zero")
	if st.Exit != 0 || st.Overflow || st.StdoutTruncated {
		t.Errorf("status %+v", st)
	}
	if f.stdoutN != bigOutput {
		t.Errorf("got %d bytes, want %d", f.stdoutN, bigOutput)
	}
}

func TestRunOverflowEndsCommand(t *testing.T) {
	f, st, _ := runHelper(t, "-root", t.TempDir(), "-max-stream", "100000", "--", "head", "-c", strconv.Itoa(bigOutput), "/dev/zero")
	if !st.Overflow || !st.StdoutTruncated || st.Exit != -1 || st.Signal != "killed" {
		t.Errorf("status %+v, want overflow and killed", st)
	}
	if f.stdoutN != 100000 {
		t.Errorf("got %d bytes, want the 100000 of the bound", f.stdoutN)
	}
}

func TestRunCombinedOverflow(t *testing.T) {
	f, st, _ := runHelper(t, "-root", t.TempDir(), "-max-combined", "10", "--", "sh", "-c", "echo 123456; echo 123456 >&2; sleep 30")
	if !st.Overflow || st.TimedOut {
		t.Errorf("status %+v, want overflow", st)
	}
	if f.stdoutN+f.stderrN != 10 {
		t.Errorf("got %d+%d bytes, want 10 in all", f.stdoutN, f.stderrN)
	}
}

func TestRunTailCarriesOn(t *testing.T) {
	f, st, _ := runHelper(t, "-root", t.TempDir(), "-tail", "-max-stream", "1000", "--", "sh", "-c", "head -c 4000000 /dev/zero; echo small >&2; exit 5")
	if st.Overflow || st.Exit != 5 || !st.StdoutTruncated || st.StderrTruncated {
		t.Errorf("status %+v, want exit 5, stdout alone truncated", st)
	}
	if f.stdoutN != 4000000 {
		t.Errorf("got %d bytes, want all 4000000", f.stdoutN)
	}
}

func TestRunTimeoutKillsEverything(t *testing.T) {
	// A child in the background, one in a session of its own, one whose
	// parent exits (a double fork) and the main process's own.
	script := `sleep 100 & echo $!; setsid sleep 100 & echo $!; (sleep 100 & echo $!); echo $$; sleep 100`
	f, st, elapsed := runHelper(t, "-root", t.TempDir(), "-timeout", "1s", "--", "bash", "-c", script)
	if !st.TimedOut || st.Exit != -1 || st.Signal != "killed" || st.Left != 0 {
		t.Errorf("status %+v, want timed out and killed", st)
	}
	if elapsed > 4*time.Second {
		t.Errorf("helper returned after %v", elapsed)
	}
	assertGone(t, f.stdout.String(), 4)
}

func TestRunNormalExitKillsBackground(t *testing.T) {
	// The background sleeps hold stdout open: the helper must not wait
	// for them.
	script := `sleep 1000 & echo $!; (setsid sleep 1000 & echo $!); exit 0`
	f, st, elapsed := runHelper(t, "-root", t.TempDir(), "-timeout", "20s", "--", "bash", "-c", script)
	if st.Exit != 0 || st.TimedOut || st.Left != 0 {
		t.Errorf("status %+v, want exit 0", st)
	}
	if elapsed > 5*time.Second {
		t.Errorf("helper returned after %v", elapsed)
	}
	assertGone(t, f.stdout.String(), 2)
}

// assertGone checks that the processes whose pids the command printed,
// one a line, are no longer alive.
func assertGone(t *testing.T, out string, want int) {
	t.Helper()
	pids := strings.Fields(out)
	if len(pids) != want {
		t.Fatalf("command printed %q, want %d pids", out, want)
	}
	for _, pid := range pids {
		if _, err := strconv.Atoi(pid); err != nil {
			t.Fatalf("not a pid: %q", pid)
		}
		// Zombies are dead; whoever inherited them reaps them.
		deadline := time.Now().Add(2 * time.Second)
		for {
			p, ok := readProc(mustAtoi(t, pid))
			if !ok || p.zombie {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("process %s is still alive", pid)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The command starts with the signals' default dispositions, whatever
// the helper does with them.
func TestRunSignalsNotIgnored(t *testing.T) {
	f, st, _ := runHelper(t, "-root", t.TempDir(), "--", "sh", "-c", "grep SigIgn /proc/self/status")
	fields := strings.Fields(f.stdout.String())
	if st.Exit != 0 || len(fields) != 2 {
		t.Fatalf("status %+v, stdout %q", st, f.stdout.String())
	}
	ignored, err := strconv.ParseUint(fields[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGPIPE, syscall.SIGTERM, syscall.SIGHUP} {
		if ignored&(1<<(sig-1)) != 0 {
			t.Errorf("the command starts with %v ignored", sig)
		}
	}
}

// A server that stops reading ends the command: the helper's writes fail
// and it kills what it started rather than leave it running.
func TestRunServerGoneKillsCommand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "run", "-root", t.TempDir(), "-timeout", "60s", "--",
		"sh", "-c", "echo $$; while :; do echo x; sleep 0.01; done")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kind, p, err := NewFrameReader(out, MaxChunk).Next()
	if err != nil || kind != FrameStdout {
		t.Fatalf("first frame %q %q, %v", kind, p, err)
	}
	pid := strings.Fields(string(p))[0]
	out.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done: // its status could not be written: a failure is expected
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("the helper kept running")
	}
	assertGone(t, pid+"\n", 1)
}

// With -hold, the end of the helper's input (the exec stream gone) ends
// a command that writes nothing.
func TestRunHoldEndsWithInput(t *testing.T) {
	cmd := exec.Command(os.Args[0], "run", "-root", t.TempDir(), "-timeout", "60s", "-hold", "--",
		"sh", "-c", "echo $$; sleep 100")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fr := NewFrameReader(out, MaxChunk+64<<10)
	kind, p, err := fr.Next()
	if err != nil || kind != FrameStdout {
		t.Fatalf("first frame %q %q, %v", kind, p, err)
	}
	pid := string(p)
	in.Close()
	status := make(chan RunStatus, 1)
	go func() {
		for {
			kind, p, err := fr.Next()
			if err != nil {
				close(status)
				return
			}
			if kind == FrameStatus {
				var st RunStatus
				json.Unmarshal(p, &st)
				status <- st
			}
		}
	}()
	select {
	case st, ok := <-status:
		if !ok || st.Signal != "killed" || st.TimedOut {
			t.Errorf("status %+v (%v), want killed", st, ok)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Error("the helper kept running")
	}
	cmd.Wait()
	assertGone(t, pid, 1)
}
