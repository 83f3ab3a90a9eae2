package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"

	"atelier/fault"
	"atelier/testrig/kubeexec"
	"atelier/testrig/wait"
)

// The rig's one pod: its container is a temporary folder.
const (
	rigNamespace = "sandbox"
	rigPod       = "pod-1"
	rigContainer = "work"
)

// execProtocols are the ways Exec streams, each of which the tests cover.
var execProtocols = []struct {
	name     string
	protocol streamProtocol
}{
	{"WebSocket", webSocketOnly},
	{"SPDY", spdyOnly},
}

// checkExecLeaks fails the test if it leaves goroutines behind once its
// cleanups (the rig's server among them) have run.
func checkExecLeaks(t *testing.T) {
	ignore := []goleak.Option{
		goleak.IgnoreCurrent(),
		// client-go's WebSocket heartbeat stops on the server's close
		// frame or, when the client closed first (a cancelled Run), at
		// its next ping, up to 5s later; nothing can stop it sooner.
		goleak.IgnoreAnyFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"),
	}
	t.Cleanup(func() {
		// spdystream's shutdown lingers up to a second after a
		// connection's Close, longer than goleak's own retries; wait for
		// it rather than ignore it.
		wait.Until(wait.Short, func() bool { return goleak.Find(ignore...) == nil })
		goleak.VerifyNone(t, ignore...)
	})
}

// newExecRig serves rigPod's exec from a temporary folder and returns an
// Exec that streams by p, and the folder.
func newExecRig(t testing.TB, p streamProtocol) (*Exec, string) {
	dir := t.TempDir()
	cfg := kubeexec.Serve(t, &kubeexec.Processes{Dir: func(id string) (string, error) {
		if id != rigNamespace+"/"+rigPod+"/"+rigContainer {
			return "", fmt.Errorf("no container %s", id)
		}
		return dir, nil
	}})
	e := NewExec(cfg, rigNamespace, rigContainer)
	e.protocol = p
	return e, dir
}

// liveOutput is a Stdout a test can look at while the command runs.
type liveOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *liveOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *liveOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

func (o *liveOutput) waitFor(t *testing.T, s string) {
	t.Helper()
	wait.For(t, wait.Short, fmt.Sprintf("%q in the output", s), func() bool { return strings.Contains(o.String(), s) })
}

func execContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait.Long.Duration())
	t.Cleanup(cancel)
	return ctx
}

func TestExecExitCode(t *testing.T) {
	checkExecLeaks(t)
	for _, p := range execProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, _ := newExecRig(t, p.protocol)
			for _, c := range []struct {
				script string
				want   int
			}{{"exit 0", 0}, {"exit 3", 3}, {"exit 255", 255}, {"kill -TERM $$", 128 + 15}} {
				code, err := e.Run(execContext(t), rigPod, []string{"sh", "-c", c.script}, ExecOptions{Stdout: io.Discard})
				if err != nil || code != c.want {
					t.Errorf("%s: got %d, %v; want %d, nil", c.script, code, err, c.want)
				}
			}
		})
	}
}

func TestExecStreamsApart(t *testing.T) {
	checkExecLeaks(t)
	for _, p := range execProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, dir := newExecRig(t, p.protocol)
			var stdout, stderr bytes.Buffer
			code, err := e.Run(execContext(t), rigPod, []string{"sh", "-c", "echo out; echo err >&2; pwd"},
				ExecOptions{Stdout: &stdout, Stderr: &stderr})
			if err != nil || code != 0 {
				t.Fatalf("got %d, %v", code, err)
			}
			if want := "out\n" + dir + "\n"; stdout.String() != want {
				t.Errorf("stdout %q, want %q", stdout.String(), want)
			}
			if stderr.String() != "err\n" {
				t.Errorf("stderr %q, want %q", stderr.String(), "err\n")
			}
		})
	}
}

func TestExecStdin(t *testing.T) {
	checkExecLeaks(t)
	for _, p := range execProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, _ := newExecRig(t, p.protocol)
			// A WebSocket v4 stream has no way to say that stdin ended (v5,
			// which the kubelet's streaming server lacks, does), so the
			// command reads a known count rather than to the end.
			var out bytes.Buffer
			code, err := e.Run(execContext(t), rigPod, []string{"head", "-c", "5"},
				ExecOptions{Stdin: strings.NewReader("hello, world"), Stdout: &out})
			if err != nil || code != 0 || out.String() != "hello" {
				t.Errorf("head -c 5: got %q, %d, %v", out.String(), code, err)
			}
			if p.protocol != spdyOnly {
				return
			}
			// SPDY closes the command's stdin when Stdin ends.
			out.Reset()
			code, err = e.Run(execContext(t), rigPod, []string{"cat"},
				ExecOptions{Stdin: strings.NewReader("to the end\n"), Stdout: &out})
			if err != nil || code != 0 || out.String() != "to the end\n" {
				t.Errorf("cat: got %q, %d, %v", out.String(), code, err)
			}
		})
	}
}

// hashCounter hashes and counts what is written to it.
type hashCounter struct {
	n int64
	h hash.Hash
}

func (c *hashCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func TestExecLargeOutput(t *testing.T) {
	checkExecLeaks(t)
	const size = 64 << 20
	// Random bytes rather than zeros, so that a chunk lost, doubled or
	// out of order changes the hash.
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	want := sha256.Sum256(data)
	for _, p := range execProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, dir := newExecRig(t, p.protocol)
			if err := os.WriteFile(filepath.Join(dir, "big"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			got := &hashCounter{h: sha256.New()}
			code, err := e.Run(execContext(t), rigPod, []string{"cat", "big"}, ExecOptions{Stdout: got})
			if err != nil || code != 0 {
				t.Fatalf("got %d, %v", code, err)
			}
			if got.n != size || !bytes.Equal(got.h.Sum(nil), want[:]) {
				t.Errorf("got %d bytes of sha256 %x, want %d of %x", got.n, got.h.Sum(nil), size, want)
			}
		})
	}
}

func TestExecTTY(t *testing.T) {
	checkExecLeaks(t)
	for _, p := range execProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, _ := newExecRig(t, p.protocol)
			keys, typist := io.Pipe()
			t.Cleanup(func() { _ = typist.Close() })
			sizes := make(chan TerminalSize, 1)
			out := &liveOutput{}
			type result struct {
				code int
				err  error
			}
			ctx := execContext(t)
			ended := make(chan result, 1)
			go func() {
				code, err := e.Run(ctx, rigPod, []string{"bash", "--norc", "--noprofile", "-i"},
					ExecOptions{Stdin: keys, Stdout: out, TTY: true, Sizes: sizes})
				ended <- result{code, err}
			}()
			typeKeys := func(s string) {
				t.Helper()
				if _, err := io.WriteString(typist, s); err != nil {
					t.Fatalf("typing %q: %v", s, err)
				}
			}
			sizes <- TerminalSize{Cols: 120, Rows: 40}
			typeKeys("echo hi-$((6*7))\r")
			out.waitFor(t, "echo hi-$((6*7))") // the keystrokes' echo
			out.waitFor(t, "hi-42")            // what they ran

			// The size goes on its own stream, which may arrive after the
			// keystrokes that follow it; ask until the answer is there.
			asked := 0
			wait.For(t, wait.Short, `"40 120" from stty size`, func() bool {
				if strings.Contains(out.String(), "40 120") {
					return true
				}
				if asked < 20 {
					asked++
					typeKeys("stty size\r")
					time.Sleep(50 * time.Millisecond)
				}
				return false
			})
			typeKeys("exit 7\r")
			select {
			case r := <-ended:
				if r.err != nil || r.code != 7 {
					t.Errorf("exit 7 on a terminal: got %d, %v", r.code, r.err)
				}
			case <-time.After(wait.Short.Duration()):
				t.Fatalf("the shell did not end; it wrote %q", out.String())
			}
		})
	}
}

func TestExecCancel(t *testing.T) {
	checkExecLeaks(t)
	for _, p := range execProtocols {
		t.Run(p.name, func(t *testing.T) {
			e, _ := newExecRig(t, p.protocol)
			ctx, cancel := context.WithCancel(execContext(t))
			out := &liveOutput{}
			ended := make(chan error, 1)
			go func() {
				_, err := e.Run(ctx, rigPod, []string{"sh", "-c", "echo $$; exec sleep 100"}, ExecOptions{Stdout: out})
				ended <- err
			}()
			out.waitFor(t, "\n")
			pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
			if err != nil {
				t.Fatalf("the command's pid: %v", err)
			}
			cancel()
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run after cancel: %v, want context.Canceled", err)
				}
			case <-time.After(time.Second):
				t.Fatal("Run did not return within a second of its context's end")
			}
			wait.For(t, wait.Short, fmt.Sprintf("process %d to end", pid), func() bool {
				return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
			})
		})
	}
}

func TestExecErrors(t *testing.T) {
	checkExecLeaks(t)
	refused := func(t *testing.T) *rest.Config {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		return &rest.Config{Host: "http://" + addr}
	}
	for _, p := range append(execProtocols, struct {
		name     string
		protocol streamProtocol
	}{"Fallback", webSocketThenSPDY}) {
		t.Run(p.name, func(t *testing.T) {
			e, _ := newExecRig(t, p.protocol)
			for _, c := range []struct {
				name        string
				exec        *Exec
				pod         string
				unavailable bool
			}{
				{"no such container", e, "pod-2", false},
				{"not a pod's name", e, "../secrets", false},
				{"no such path", &Exec{cfg: &rest.Config{Host: e.cfg.Host + "/elsewhere"}, namespace: rigNamespace, container: rigContainer, protocol: p.protocol}, rigPod, false},
				{"server down", &Exec{cfg: refused(t), namespace: rigNamespace, container: rigContainer, protocol: p.protocol}, rigPod, true},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), wait.Short.Duration())
				code, err := c.exec.Run(ctx, c.pod, []string{"true"}, ExecOptions{Stdout: io.Discard})
				late := ctx.Err()
				cancel()
				if err == nil || late != nil {
					t.Errorf("%s: got %d, %v (context: %v); want an error before the deadline", c.name, code, err, late)
					continue
				}
				var fe fault.Error
				if got := errors.As(err, &fe) && fe.Fault().Kind == fault.Unavailable && errors.Is(err, ErrClusterUnreachable); got != c.unavailable {
					t.Errorf("%s: %v: of fault.Unavailable is %v, want %v", c.name, err, got, c.unavailable)
				}
				if !strings.Contains(err.Error(), c.pod) {
					t.Errorf("%s: %v does not name the pod", c.name, err)
				}
			}
		})
	}
}

func TestExecFallbackRuns(t *testing.T) {
	checkExecLeaks(t)
	// The kubelet's streaming server speaks WebSocket v4, which the default
	// choice must accept rather than fall back for.
	e, _ := newExecRig(t, webSocketThenSPDY)
	var out bytes.Buffer
	code, err := e.Run(execContext(t), rigPod, []string{"echo", "hi"}, ExecOptions{Stdout: &out})
	if err != nil || code != 0 || out.String() != "hi\n" {
		t.Errorf("got %q, %d, %v", out.String(), code, err)
	}
}

func TestExecFallsBackToSPDY(t *testing.T) {
	checkExecLeaks(t)
	e, _ := newExecRig(t, webSocketThenSPDY)
	// A proxy in front that passes SPDY but refuses WebSocket upgrades,
	// as API servers before 1.30 and some proxies do.
	to, err := url.Parse(e.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	pass := httputil.NewSingleHostReverseProxy(to)
	var refused, passed atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			refused.Add(1)
			http.Error(w, "websocket is not passed here", http.StatusBadRequest)
			return
		}
		passed.Add(1)
		pass.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.cfg = &rest.Config{Host: front.URL}
	var out bytes.Buffer
	code, err := e.Run(execContext(t), rigPod, []string{"sh", "-c", "echo hi; exit 4"}, ExecOptions{Stdout: &out})
	if err != nil || code != 4 || out.String() != "hi\n" {
		t.Errorf("got %q, %d, %v", out.String(), code, err)
	}
	if refused.Load() != 1 || passed.Load() != 1 {
		t.Errorf("the proxy refused %d WebSocket requests and passed %d others, want 1 and 1", refused.Load(), passed.Load())
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for _, p := range execProtocols {
		b.Run(p.name, func(b *testing.B) {
			e, _ := newExecRig(b, p.protocol)
			ctx := execContext(b)
			for b.Loop() {
				if code, err := e.Run(ctx, rigPod, []string{"true"}, ExecOptions{Stdout: io.Discard}); err != nil || code != 0 {
					b.Fatalf("true: %d, %v", code, err)
				}
			}
		})
	}
}

// BenchmarkExecKeystroke is a keystroke's round trip through a shell on a
// terminal over WebSocket: typed, echoed by the shell's line editor, read
// back. Keystrokes alternate between a letter and a backspace, so the line
// never grows and each has an answer of its own to wait for.
func BenchmarkExecKeystroke(b *testing.B) {
	e, _ := newExecRig(b, webSocketOnly)
	keys, typist := io.Pipe()
	screen, shell := io.Pipe()
	ctx := execContext(b)
	ended := make(chan error, 1)
	go func() {
		_, err := e.Run(ctx, rigPod, []string{"bash", "--norc", "--noprofile", "-i"},
			ExecOptions{Stdin: keys, Stdout: shell, TTY: true})
		_ = shell.Close()
		ended <- err
	}()
	b.Cleanup(func() {
		_, _ = io.WriteString(typist, "\x15exit\r") // Ctrl-U first: the line may hold a letter
		go func() { _, _ = io.Copy(io.Discard, screen) }()
		if err := <-ended; err != nil {
			b.Errorf("the shell: %v", err)
		}
		_ = typist.Close()
	})
	buf := make([]byte, 4096)
	readUntil := func(c byte) {
		for {
			n, err := screen.Read(buf)
			if err != nil {
				b.Fatalf("reading the terminal: %v", err)
			}
			if bytes.IndexByte(buf[:n], c) >= 0 {
				return
			}
		}
	}
	// The shell is ready once it echoes.
	_, _ = io.WriteString(typist, "x")
	readUntil('x')
	_, _ = io.WriteString(typist, "\x7f")
	readUntil('\b')
	i := 0
	for b.Loop() {
		key, echo := byte('a'), byte('a')
		if i%2 == 1 {
			key, echo = 0x7f, '\b'
		}
		i++
		if _, err := typist.Write([]byte{key}); err != nil {
			b.Fatal(err)
		}
		readUntil(echo)
	}
}
