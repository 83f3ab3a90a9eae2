package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/sys/unix"

	"atelier/models"
	"atelier/sandbox"
	"atelier/testrig/dbtest"
	"atelier/testrig/liveserver"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// sandboxHelper is a plain build of the server that runs the tests'
// sandboxed commands, set by TestMain when the tests run as root. A
// helper that is this test binary would start with the race detector,
// which costs each command half a second of CPU; what the helper does
// is the sandbox package's to test, and the root package's tests run the
// server with its own binary as helper.
var sandboxHelper string

func runTests(m *testing.M) int {
	if spec := os.Getenv(instanceEnv); spec != "" {
		return runInstance(spec)
	}
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "atelier-helper-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "server tests:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if sandboxHelper, err = liveserver.Build(dir, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "server tests: the sandbox's helper:", err)
			return 1
		}
	}
	return pgtest.Run(m)
}

// harness is a real Atelier over a fresh database, served over real HTTP.
type harness struct {
	t     *testing.T
	cfg   Config
	store *models.Store
	app   *App
	srv   *httptest.Server
	clock *clock
	logs  *logBuffer // the server's log, every level
	// statements counts what the server sends to PostgreSQL, and
	// (RequestSQL) what it sends for the requests the tests make.
	statements *dbtest.Statements
}

// clock is the harness's time: the real time when it started, moved only
// by Advance, so limits can be crossed without waiting.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// uidBlock is a block of a million sessions' uids for one harness, away
// from the sandbox package's tests. The block is held by a lock on a file
// while the test runs, so the server tests' binaries that test.sh runs
// side by side never hand out one uid twice.
func uidBlock(t *testing.T) uint32 {
	t.Helper()
	for range 1000 {
		n := rand.N(250)
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("atelier-test-uids-%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return 4_000_000_000 + uint32(n)*1_000_000
	}
	t.Fatal("no block of sessions' uids is free")
	return 0
}

func newHarness(t *testing.T, tweak ...func(*Config)) *harness {
	t.Helper()
	store, statements := dbtest.CountedStore(t)
	return newHarnessOn(t, store, statements, tweak...)
}

// newHarnessOn is newHarness over a store the test made itself (statements
// may be nil).
func newHarnessOn(t *testing.T, store *models.Store, statements *dbtest.Statements, tweak ...func(*Config)) *harness {
	t.Helper()
	// 0700 all the way: sessions' commands see their checkouts through the
	// sandbox's binds, never by walking down. (t.TempDir's own folder is
	// 0700, the numbered one inside follows the umask.)
	base := t.TempDir()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(func(key string) string {
		switch key {
		case "ATELIER_DATA":
			return filepath.Join(base, "data")
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sandbox.UIDBase = uidBlock(t)
	cfg.Sandbox.UIDCount = 1_000_000
	cfg.Sandbox.Helper = sandboxHelper
	for _, f := range tweak {
		f(&cfg)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// ATELIER_TEST_LOG=1 shows the server's log, for a failing test.
	var logOut io.Writer = io.Discard
	if os.Getenv("ATELIER_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	level := slog.LevelInfo
	if os.Getenv("ATELIER_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	logs := &logBuffer{}
	log := slog.New(slog.NewMultiHandler(
		slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}),
		// Every line at every level, for tests of what the server logs.
		slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}),
	))
	// A failing test shows what the server warned of, so a failure in CI
	// explains itself without a second run.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's warnings and errors:\n%s", logs.severe())
		}
	})
	// The listener comes first: other instances in a test reach this one
	// at its address (Config.InternalURL).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.InternalURL = "http://" + ln.Addr().String()
	if cfg.LocalHost == localHostHere {
		cfg.LocalHost = cfg.InternalURL
	}
	clk := &clock{now: time.Now()}
	app, err := New(context.Background(), cfg, store, log, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	// What a test left mounted that the App's Close did not take down (a
	// check's disk, say), as the next start would. Last, once nothing of
	// the server runs.
	t.Cleanup(func() {
		if err := sandbox.CleanDisks(cfg.SandboxDiskDir()); err != nil {
			t.Error(err)
		}
		if err := sandbox.CleanCaches(cfg.SandboxCacheDir()); err != nil {
			t.Error(err)
		}
	})
	// Connections are prepared as the real server prepares them.
	handler := app.Handler
	if statements != nil {
		handler = statements.Attribute(handler)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: handler, ConnContext: connContext}}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(app.Events.Close)
	// A clean shutdown, as Run's: sessions' processes, overlays and disks go.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Close(ctx); err != nil {
			t.Errorf("closing the app: %v", err)
		}
	})
	return &harness{t: t, cfg: cfg, store: store, app: app, srv: srv, clock: clk, logs: logs, statements: statements}
}

// logBuffer keeps what the server logged.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// severe is the lines at WARN or ERROR, the last 100 of them.
func (b *logBuffer) severe() string {
	var lines []string
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, " level=WARN ") || strings.Contains(line, " level=ERROR ") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines[max(len(lines)-100, 0):], "")
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// client is one browser: a cookie jar, no automatic redirects, and the CSRF
// token of the last page it loaded.
type client struct {
	h    *harness
	http *http.Client
	csrf string
}

func (h *harness) anonymous() *client {
	jar, _ := cookiejar.New(nil)
	c := &client{h: h, http: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	c.loadCSRF("/login")
	return c
}

// user creates a user and returns a client signed in as them.
func (h *harness) user(name string, siteAdmin bool) *client {
	h.t.Helper()
	if _, err := h.app.Auth.CreateUser(context.Background(), name, "password-"+name, siteAdmin); err != nil {
		h.t.Fatal(err)
	}
	c := h.anonymous()
	res := c.post("/login", url.Values{"username": {name}, "password": {"password-" + name}})
	if res.StatusCode != http.StatusSeeOther {
		h.t.Fatalf("login %s: %d %s", name, res.StatusCode, readBody(res))
	}
	c.loadCSRF("/projects")
	return c
}

func (c *client) loadCSRF(path string) {
	c.h.t.Helper()
	doc := c.page(path)
	c.csrf, _ = doc.Find(`meta[name="csrf-token"]`).Attr("content")
	if c.csrf == "" {
		c.h.t.Fatalf("%s carries no csrf-token meta", path)
	}
}

type header map[string]string

func (c *client) do(method, path string, body io.Reader, hdr header) *http.Response {
	c.h.t.Helper()
	req, err := http.NewRequest(method, c.h.srv.URL+path, body)
	if err != nil {
		c.h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		c.h.t.Fatal(err)
	}
	c.h.t.Cleanup(func() { res.Body.Close() })
	return res
}

func (c *client) get(path string, hdr header) *http.Response {
	return c.do(http.MethodGet, path, nil, hdr)
}

// post sends a form with the page's CSRF token in the form field.
func (c *client) post(path string, form url.Values, hdr ...header) *http.Response {
	if form == nil {
		form = url.Values{}
	}
	if form.Get("csrf_token") == "" && c.csrf != "" {
		form.Set("csrf_token", c.csrf)
	}
	return c.postRaw(path, form, hdr...)
}

// postRaw sends the form exactly as given.
func (c *client) postRaw(path string, form url.Values, hdr ...header) *http.Response {
	h := header{"Content-Type": "application/x-www-form-urlencoded"}
	for _, extra := range hdr {
		for k, v := range extra {
			h[k] = v
		}
	}
	return c.do(http.MethodPost, path, strings.NewReader(form.Encode()), h)
}

// del sends DELETE with the CSRF header, as htmx does.
func (c *client) del(path string, hdr ...header) *http.Response {
	h := header{"X-CSRF-Token": c.csrf}
	for _, extra := range hdr {
		for k, v := range extra {
			h[k] = v
		}
	}
	return c.do(http.MethodDelete, path, nil, h)
}

func (c *client) page(path string) *goquery.Document {
	c.h.t.Helper()
	res := c.get(path, nil)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("GET %s: %d %s", path, res.StatusCode, readBody(res))
	}
	doc, err := goquery.NewDocumentFromReader(res.Body)
	if err != nil {
		c.h.t.Fatal(err)
	}
	return doc
}

var jsonAccept = header{"Accept": "application/json"}

func readBody(res *http.Response) string {
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

func decode[T any](t *testing.T, res *http.Response) T {
	t.Helper()
	var v T
	body := readBody(res)
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decoding %q: %v", body, err)
	}
	return v
}

type problem struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Hint   string `json:"hint"`
}

// expectProblem asserts a JSON error with its status and reason.
func expectProblem(t *testing.T, res *http.Response, status int, reason string) problem {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", res.Request.Method, res.Request.URL.Path, res.StatusCode, status, readBody(res))
	}
	p := decode[problem](t, res)
	if p.Reason != reason || p.Error == "" {
		t.Fatalf("%s %s: problem %+v, want reason %q", res.Request.Method, res.Request.URL.Path, p, reason)
	}
	return p
}

// localRootsOfTest lets everyone create Local projects in the test's
// temporary folders (t.TempDir's shared parent), as an operator lists
// folders in ATELIER_LOCAL_ROOTS.
func localRootsOfTest(t *testing.T) func(*Config) {
	root := filepath.Dir(t.TempDir())
	return func(c *Config) { c.LocalRoots = []string{root} }
}

// createProject makes a container project as c and returns its id.
func (c *client) createProject(name string) int64 {
	c.h.t.Helper()
	res := c.post("/projects", url.Values{"name": {name}, "mode": {"container"}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		c.h.t.Fatalf("create %s: %d %s", name, res.StatusCode, readBody(res))
	}
	return decode[models.Project](c.h.t, res).ID
}
