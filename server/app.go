package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/changes"
	"atelier/code"
	"atelier/editsession"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/handlers"
	"atelier/limits"
	"atelier/meter"
	"atelier/metrics"
	"atelier/models"
	"atelier/projects"
	"atelier/sandbox"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/terminal"
	"atelier/views"
	"atelier/workspace"
)

// App is Atelier assembled: its services and the HTTP handler over them.
type App struct {
	Handler  http.Handler
	Auth     *auth.Service
	Projects *projects.Service
	// EditSessions are people's edit sessions on projects; sign-ins are
	// Auth's and their pages signIn's. Runtime runs their checkouts and
	// commands, Shells their terminals.
	EditSessions *editsession.Sessions
	Runtime      *editsession.Runtime
	Shells       *editsession.Shells
	Events       *events.Recorder
	Meter        *meter.Meter
	Sandbox      *sandbox.Sandbox
	// Instance names this server process in leases and reservations.
	Instance  string
	Terminals *terminal.Manager // every terminal of this instance
	// Changes carry submitted edits to canonical: verify, approve, release.
	Changes *changes.Service

	log      *slog.Logger
	adapter  handlers.Adapter
	cookies  auth.Cookies
	health   *handlers.Health
	signIn   *handlers.Sessions
	projects *handlers.Projects
	users    *handlers.Users
	code     *handlers.Code
	edit     *handlers.EditSessions
	metrics  *metrics.Metrics
	scrape   *handlers.Metrics
	admin    *handlers.Dashboard
	changes  *handlers.Changes

	maxImportBytes int64
	inputBytes     int
	trustedProxies []string            // CIDRs
	streams        *limits.Gate[int64] // open event streams per account
}

// newInstanceID names this process: a restarted server is a new instance,
// so what the old one held (reservations, terminals) can be told apart.
func newInstanceID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// cachedTrees is how many parsed tree objects stay in memory (a few KiB each).
const cachedTrees = 20_000

// openObjects opens the configured object store: S3 when an endpoint is
// set, else a folder in the data dir.
func openObjects(ctx context.Context, cfg Config) (storage.ObjectStore, error) {
	if cfg.S3.Endpoint != "" {
		return storage.NewS3(ctx, cfg.S3)
	}
	return storage.NewLocal(cfg.ObjectsDir())
}

// New builds the App over an open, migrated store. now is the clock.
func New(ctx context.Context, cfg Config, store *models.Store, log *slog.Logger, now func() time.Time) (*App, error) {
	ws, err := workspace.New(cfg.WorkspacesRoot, serverPaths(cfg), workspace.LocalPolicy{Roots: cfg.LocalRoots,
		SessionUIDs: workspace.UIDRange{Base: cfg.Sandbox.UIDBase, Count: cfg.Sandbox.UIDCount},
		InContainer: cfg.InContainer}, log)
	if err != nil {
		return nil, err
	}
	git, err := gitsvc.New(gitsvc.Config{Root: cfg.GitDir(), Log: log, AllowNetworks: cfg.ImportAllowNetworks})
	if err != nil {
		return nil, err
	}
	objects, err := openObjects(ctx, cfg)
	if err != nil {
		return nil, err
	}
	codeStore, err := codestore.New(objects, git, store, log, cachedTrees)
	if err != nil {
		return nil, err
	}
	render, err := views.NewRenderer(handlers.Chrome)
	if err != nil {
		return nil, err
	}
	authSvc, err := auth.NewService(store, now)
	if err != nil {
		return nil, err
	}
	codeSvc := code.NewService(ws, git, codeStore, store, log, code.ImportLimits{Running: cfg.ImportsMax, PerHour: cfg.ImportsPerHour})
	recorder := events.New(store, log)
	cfg.Sandbox.Log = log
	box, err := sandbox.New(cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	usage := meter.New(store, cfg.SandboxCap, now)
	// Open dashboards hear of every change to a meter.
	usage.OnChange(func(int64) { recorder.Hint(events.TopicMeters) })
	instance := newInstanceID()
	terms := terminal.NewManager(terminal.Config{})
	streams := limits.NewStreams()
	metered := metrics.New()
	runtime := editsession.NewRuntime(store, git, codeStore, ws, editsession.Sandboxes{
		Box: box, Meter: usage, LocalArea: cfg.SandboxDir(),
		UIDBase: cfg.Sandbox.UIDBase, UIDCount: cfg.Sandbox.UIDCount, Instance: instance,
		MaxRunning: cfg.SandboxMaxRunning, DiskBytes: cfg.SandboxDiskBytes, DiskArea: cfg.SandboxDiskDir(),
		Observer: metered, Hint: recorder.Hint,
	}, terms, now, log)
	shells := editsession.NewShells(store, runtime, terms, now, log)
	sessionCfg := cfg.Sessions
	// The last uid of the block runs Changes' checks (Runtime.CheckUID).
	sessionCfg.SandboxSlots = cfg.Sandbox.UIDCount - 1
	// An ending session's shells close first, then its processes and
	// checkout go.
	sessionSvc := editsession.New(store, git, codeStore, ws, recorder, sessionCfg, now, log, shells, runtime)
	projectSvc := projects.NewService(store, ws, git, codeStore, sessionSvc, now, log, cfg.MaxProjects)
	changeSvc := changes.New(store, git, codeStore, ws, sessionSvc, runtime, recorder, now, log)
	metered.Read(metrics.Sources{Meter: usage, Store: store, Terminals: terms, Streams: streams, Commands: runtime,
		Changes: changeSvc})
	a := &App{
		Auth:         authSvc,
		Projects:     projectSvc,
		EditSessions: sessionSvc,
		Runtime:      runtime,
		Shells:       shells,
		Events:       recorder,
		Meter:        usage,
		Sandbox:      box,
		Instance:     instance,
		Terminals:    terms,
		Changes:      changeSvc,
		log:          log,
		adapter:      handlers.Adapter{Render: render, Log: log},
		cookies:      auth.Cookies{AlwaysSecure: cfg.SecureCookies},
		health:       &handlers.Health{Ping: store.Ping},
		projects:     &handlers.Projects{Render: render, Projects: projectSvc, Meter: usage},
		users:        &handlers.Users{Render: render, Auth: authSvc, Store: store},
		code: &handlers.Code{Render: render, Projects: projectSvc, Code: codeSvc,
			MaxImportBytes: cfg.MaxImportBytes, Meter: usage, Log: log},
		edit: &handlers.EditSessions{Render: render, Projects: projectSvc, Sessions: sessionSvc,
			Runtime: runtime, Shells: shells, Idle: cfg.Sessions.Idle, Now: now, CommandHint: commandHint(box)},
		admin: &handlers.Dashboard{Render: render, Meter: usage, Sessions: sessionSvc, Runtime: runtime,
			Shells: shells, Events: recorder, Store: store},
		changes: &handlers.Changes{Render: render, Projects: projectSvc, Changes: changeSvc, Code: codeSvc,
			Events: recorder},
		maxImportBytes: cfg.MaxImportBytes,
		inputBytes:     terms.Config().InputBytes,
		streams:        streams,
		metrics:        metered,
	}
	for _, p := range cfg.TrustedProxies {
		a.trustedProxies = append(a.trustedProxies, p.String())
	}
	a.signIn = &handlers.Sessions{Render: render, Auth: authSvc, Cookies: a.cookies}
	a.scrape = &handlers.Metrics{Token: cfg.MetricsToken, Identify: authSvc.Identify(a.cookies), Serve: metered.Handler()}
	a.Handler = a.routes()
	return a, nil
}

// commandHint is an example command that works in this host's sandbox:
// Go's tests when Go is on the sandbox's PATH, else a listing.
func commandHint(box *sandbox.Sandbox) string {
	if box.Has("go") {
		return "go test ./..."
	}
	return "ls -la"
}

// serverPaths are the folders a Local project must never overlap: the data
// dir, the working directory and the binary's folder.
func serverPaths(cfg Config) []string {
	paths := []string{cfg.DataDir}
	if wd, err := os.Getwd(); err == nil {
		paths = append(paths, wd)
	}
	if exe, err := os.Executable(); err == nil {
		paths = append(paths, filepath.Dir(exe))
	}
	return paths
}

// recover turns a panic into a logged 500 instead of a dropped connection.
func (a *App) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			a.adapter.RenderError(c, fmt.Errorf("panic: %v", v))
			c.Abort()
		}
	}()
	c.Next()
}

// observeRequests times every request under the route it matched, so the
// label is a template and unknown paths share one series.
func (a *App) observeRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	a.metrics.ObserveRequest(c.FullPath(), c.Request.Method, c.Writer.Status(), time.Since(start))
}

func (a *App) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	a.log.Debug("request", "method", c.Request.Method, "path", c.Request.URL.Path,
		"status", c.Writer.Status(), "duration", time.Since(start))
}
