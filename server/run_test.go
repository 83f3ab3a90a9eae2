package server

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atelier/testrig/dbtest"
	"atelier/testrig/liveserver"
)

// TestRunLeavesNothingRunning: the server started as main starts it, on a
// real port over the test's database, serves a signed-in person, and once
// its context ends Run returns only after every goroutine of Atelier's it
// started has ended (its background loops included); a moment later
// nothing at all it started is left, the pool's and the HTTP server's
// included.
func TestRunLeavesNothingRunning(t *testing.T) {
	needRoot(t)
	// Whatever earlier tests of the binary left winding down is theirs.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	before := atelierGoroutines()

	logs := &logBuffer{}
	run := startRun(t, slog.NewTextHandler(logs, nil), nil)
	admin, err := liveserver.SignIn(run.base, "admin", liveserver.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateProject("leaks"); err != nil {
		t.Fatal(err)
	}
	admin.HC.CloseIdleConnections()

	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// At once: Run waits for what it started rather than leaving it to
	// end on its own later.
	if left := newGoroutines(before, atelierGoroutines()); len(left) > 0 {
		t.Fatalf("%d goroutines of Atelier's still ran when Run returned:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
	if strings.Contains(logs.String(), "background loops still run") {
		t.Fatalf("the shutdown waited out a loop:\n%s", logs)
	}
}

// The same with sessions' code in pods: a command runs in one through
// exec before the stop, and the provider's loops (the warm pool, the
// reaper) and its exec streams end with Run too.
func TestRunLeavesNothingRunningInAPod(t *testing.T) {
	needRoot(t)
	// The rig's cluster (its exec server, its pods' main processes) is the
	// test's, started before the goroutines are counted: a block of uids
	// past startRun's.
	var rig Config
	rig.Sandbox.UIDBase, rig.Sandbox.UIDCount = 4_260_000_000, 1_000_000
	onKube(t)(&rig)
	// A pod's containers' main processes start with its first exec and
	// are the rig's until its end, as a cluster's are the kubelet's.
	mains := "atelier/testrig/kubeexec.(*Processes).holder.func1"
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction(mains))
	before := atelierGoroutines()

	logs := &logBuffer{}
	run := startRun(t, slog.NewTextHandler(logs, nil), func(c *Config) { c.Kube, c.kubeRig = rig.Kube, rig.kubeRig })
	admin, err := liveserver.SignIn(run.base, "admin", liveserver.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	id, err := admin.CreateProject("leaks")
	if err != nil {
		t.Fatal(err)
	}
	var session struct {
		ID string `json:"id"`
	}
	if err := admin.PostJSON("/projects/"+itoa(id)+"/sessions", nil, &session); err != nil || session.ID == "" {
		t.Fatalf("open a session: %+v %v", session, err)
	}
	var out commandJSON
	if err := admin.PostJSON("/projects/"+itoa(id)+"/sessions/"+session.ID+"/commands", url.Values{"command": {"echo in-a-pod"}}, &out); err != nil || out.Stdout != "in-a-pod\n" {
		t.Fatalf("a command in a pod: %+v %v", out, err)
	}
	admin.HC.CloseIdleConnections()

	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	left := newGoroutines(before, atelierGoroutines())
	left = slices.DeleteFunc(left, func(g string) bool { return strings.Contains(g, mains) })
	if len(left) > 0 {
		t.Fatalf("%d goroutines of Atelier's still ran when Run returned:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
	if strings.Contains(logs.String(), "background loops still run") {
		t.Fatalf("the shutdown waited out a loop:\n%s", logs)
	}
}

// TestShutdownNamesALoopThatOverstays: a background loop that does not
// return once the server's context ends (here the session sweep, held
// inside its log line about an orphaned fork it removed at start) holds
// the shutdown no longer than the loops' grace; the log names the loop,
// and the loop ends once it is let go.
func TestShutdownNamesALoopThatOverstays(t *testing.T) {
	needRoot(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	logs := &logBuffer{}
	held := &holdingHandler{msg: "removed an orphaned session fork", reached: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	letGo := func() { once.Do(func() { close(held.release) }) }
	defer letGo()
	run := startRun(t, slog.NewMultiHandler(slog.NewTextHandler(logs, nil), held), func(cfg *Config) {
		cfg.LoopsGrace = time.Second
		// A session's fork no unfinished session owns: the sweep's first
		// pass removes it and says so.
		if err := os.MkdirAll(filepath.Join(cfg.GitDir(), "edit-0123456789abcdef.git"), 0o700); err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-held.reached:
	case <-time.After(time.Minute):
		t.Fatal("the session sweep did not remove the orphaned fork within a minute")
	}

	// Run returns while the loop is still held: the wait is bounded.
	if err := run.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Logged only once the grace ran out with the loop still running.
	want := `msg="background loops still run after the shutdown's wait; stopping without them" loops="[session sweep]"`
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("the log does not name the held loop (%s):\n%s", want, logs)
	}
	letGo()
}

// running is a server Run runs in a goroutine of the test's.
type running struct {
	base   string // http://host:port
	cancel context.CancelFunc
	done   chan error
}

// startRun runs the server as main does, on a free loopback port over a
// fresh database of the test's, logging to handler, and waits until it
// answers /healthz. tweak, when set, changes the configuration first (its
// data dir exists by then).
func startRun(t *testing.T, handler slog.Handler, tweak func(*Config)) *running {
	t.Helper()
	base := t.TempDir()
	addr, err := liveserver.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(func(key string) string {
		switch key {
		case "ATELIER_DATA":
			return filepath.Join(base, "data")
		case "ATELIER_ADDR":
			return addr
		case "DATABASE_URL":
			return dbtest.DSN(t)
		case "ATELIER_ADMIN_PASSWORD":
			return liveserver.AdminPassword
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	// As newHarnessOn's: a block of uids of its own.
	cfg.Sandbox.UIDBase = 4_000_000_000 + uint32(rand.N(250))*1_000_000
	cfg.Sandbox.UIDCount = 1_000_000
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if os.Getenv("ATELIER_TEST_LOG") != "" {
		handler = slog.NewMultiHandler(handler, slog.NewTextHandler(os.Stderr, nil))
	}

	ctx, cancel := context.WithCancel(context.Background())
	r := &running{base: "http://" + addr, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, cfg, slog.New(handler), io.Discard) }()
	t.Cleanup(cancel)
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := hc.Get(r.base + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return r
			}
		}
		select {
		case err := <-r.done:
			t.Fatalf("Run ended before it served: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not answer /healthz within a minute")
		}
	}
}

// stop ends the server's context and answers what Run returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return within two minutes of its context's end")
		return nil
	}
}

// holdingHandler holds the goroutine that logs msg until release closes,
// closing reached as it starts to.
type holdingHandler struct {
	msg              string
	reached, release chan struct{}
	once             sync.Once
}

func (h *holdingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *holdingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.reached) })
		<-h.release
	}
	return nil
}

func (h *holdingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *holdingHandler) WithGroup(string) slog.Handler      { return h }

// atelierGoroutines are the stacks of the goroutines that run a function
// of Atelier's (a frame of a package atelier/...), keyed by their header
// line ("goroutine N [state]:"), this test's own apart.
func atelierGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		if !strings.Contains(frames, "\natelier/") && !strings.HasPrefix(frames, "atelier/") {
			continue
		}
		if strings.Contains(frames, "atelier/server.TestRunLeavesNothingRunning") ||
			strings.Contains(frames, "atelier/server.atelierGoroutines") {
			continue
		}
		id, _, _ := strings.Cut(header, " [")
		out[id] = g
	}
	return out
}

// newGoroutines are the stacks in now of goroutines absent from before.
func newGoroutines(before, now map[string]string) []string {
	var out []string
	for id, g := range now {
		if _, ok := before[id]; !ok {
			out = append(out, g)
		}
	}
	return out
}
