package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"atelier/auth"
	"atelier/bus"
	"atelier/changes"
	"atelier/code"
	"atelier/editsession"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/handlers"
	"atelier/instances"
	"atelier/limits"
	"atelier/meter"
	"atelier/metrics"
	"atelier/models"
	"atelier/projects"
	"atelier/sandbox"
	"atelier/sandbox/kube"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/terminal"
	"atelier/views"
	"atelier/workbench"
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
	Runtime      *workbench.Runtime
	Shells       *workbench.Shells
	Recordings   *workbench.Recordings
	Events       *events.Recorder
	// Bus carries events and hints between the instances on the database;
	// App.Close closes it last, and then waits for followers, the
	// goroutines here that read its subscriptions.
	Bus       bus.Bus
	followers *sync.WaitGroup
	// toPeers carries requests handed to other instances; nil alone.
	toPeers *http.Transport
	// localHome hands requests about Local projects to the instance that
	// serves them; nil on that instance, and alone.
	localHome *localHome
	Meter     *meter.Meter
	Sandbox   *sandbox.Sandbox // this host's jail; nil when sessions run in a cluster
	// Instance names this server process in leases and reservations;
	// Instances keeps its row among the instances on the database.
	Instance  string
	Instances *instances.Instance
	Terminals *terminal.Manager // every terminal of this instance
	// Changes carry submitted edits to canonical: verify, approve, release.
	Changes *changes.Service
	// Code is the code store: published trees, and their collector.
	Code *codestore.Store
	// objects is the object store under Code and the recordings; App.Close
	// closes it once nothing here writes to it.
	objects storage.ObjectStore

	log      *slog.Logger
	adapter  handlers.Adapter
	cookies  auth.Cookies
	health   *handlers.Health
	signIn   *handlers.Sessions
	projects *handlers.Projects
	users    *handlers.Users
	account  *handlers.Account
	code     *handlers.Code
	edit     *handlers.EditSessions
	metrics  *metrics.Metrics
	scrape   *handlers.Metrics
	admin    *handlers.Dashboard
	changes  *handlers.Changes

	maxImportBytes int64
	inputBytes     int
	trustedProxies []string            // CIDRs
	streams        *limits.Gate[int64] // open event streams per account here
	// openStreams bounds a person's event streams, on every instance
	// together when several serve; a stream handed to another instance
	// counts there.
	openStreams handlers.Holder
	searches    *limits.Gate[int64] // running content searches per account
}

// changesQueued is the bus's topic of a Change queued for its check.
const changesQueued = "changes.queued"

// hostname names this host in instances' places.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
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
	codeStore, err := codestore.New(objects, git, store, log, codestore.Options{
		CachedTrees: cachedTrees, Grace: cfg.CollectGrace, MaxProjectBytes: cfg.MaxProjectBytes})
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
	codeSvc := code.NewService(code.Options{Workspace: ws, Git: git, Code: codeStore, DB: store, Log: log,
		Imports: code.ImportLimits{Running: cfg.ImportsMax, PerHour: cfg.ImportsPerHour, MaxExpandedBytes: cfg.MaxExpandedBytes}})
	if err := os.MkdirAll(cfg.UploadDir(), 0o700); err != nil {
		return nil, fmt.Errorf("server: uploads folder: %w", err)
	}
	// Sessions' code runs in this host's jail, which needs root, or in
	// pods of a cluster, which need nothing of this host.
	var box *sandbox.Sandbox
	var provider sandbox.Provider
	if cfg.Kube != nil {
		if provider, err = kubeProvider(*cfg.Kube, cfg.kubeRig, store, log); err != nil {
			return nil, err
		}
	} else {
		cfg.Sandbox.Log = log
		if box, err = sandbox.New(cfg.Sandbox); err != nil {
			return nil, err
		}
		provider = sandbox.NewLocal(sandbox.LocalConfig{Box: box, Area: cfg.SandboxDir(), Log: log,
			DiskBytes: cfg.SandboxDiskBytes, DiskArea: cfg.SandboxDiskDir(),
			CacheBytes: cfg.SandboxCacheBytes, CacheTotal: cfg.SandboxCacheTotal, CacheArea: cfg.SandboxCacheDir(),
			BaseArea: cfg.SandboxBaseDir()})
	}
	// Events and hints reach the pages of every instance on the database,
	// this one's through the bus too. Nothing after this fails.
	shared, err := bus.NewPostgres(ctx, bus.Options{Listener: store.Listener, Notify: store.Notify, Log: log})
	if err != nil {
		return nil, err
	}
	recorder, err := events.NewShared(store, log, cfg.Events, shared)
	if err != nil {
		shared.Close()
		return nil, err
	}
	usage := meter.New(store, cfg.SandboxCap, now)
	// Open dashboards hear of every change to a meter.
	usage.OnChange(func(int64) { recorder.Hint(events.TopicMeters) })
	instance := newInstanceID()
	terms := terminal.NewManager(cfg.Terminals)
	streams := limits.NewStreams()
	metered := metrics.New()
	edits := editsession.NewEdits(store, git, codeStore, now)
	runtime := workbench.NewRuntime(workbench.RuntimeOptions{DB: store, Git: git, Edits: edits,
		Terminals: terms, Now: now, Log: log, Sandboxes: workbench.Sandboxes{
			Provider: provider, Meter: usage, UIDBase: cfg.Sandbox.UIDBase, UIDCount: cfg.Sandbox.UIDCount, Instance: instance,
			MaxRunning: cfg.SandboxMaxRunning, CaptureBudget: cfg.SandboxCaptureBudget, Observer: metered, Hint: recorder.Hint,
		}})
	shells := workbench.NewShells(workbench.ShellsOptions{DB: store, Runtime: runtime, Edits: edits, Terminals: terms,
		Meter: usage, Instance: instance, Hint: recorder.Hint, Now: now, Log: log})
	recordings := workbench.NewRecordings(workbench.RecordingsOptions{DB: store, Shells: shells, Objects: objects,
		MaxBytes: cfg.RecordingMaxBytes, Now: now, Log: log})
	sessionCfg := cfg.Sessions
	// The last uid of the block runs Changes' checks (Runtime.CheckUID).
	sessionCfg.SandboxSlots = cfg.Sandbox.UIDCount - 1
	sessionCfg.DiskBytes, sessionCfg.DiskTotal = cfg.SandboxDiskBytes, cfg.SandboxDiskTotal
	if cfg.SandboxDiskBytes > 0 && cfg.SandboxDiskTotal > 0 {
		log.Info("sessions' disks", "each", cfg.SandboxDiskBytes, "total", cfg.SandboxDiskTotal,
			"sessions", cfg.SandboxDiskTotal/cfg.SandboxDiskBytes)
	}
	// An ending session's shells close first, then its processes and
	// checkout go.
	sessionSvc := editsession.New(editsession.Options{DB: store, Git: git, Code: codeStore, Workspace: ws,
		Events: recorder, Config: sessionCfg, Now: now, Log: log, Cleaners: []editsession.Cleaner{shells, runtime}})
	servesLocal, _ := cfg.localHome()
	projectSvc := projects.NewService(projects.Options{Store: store, Workspace: ws, Git: git, Code: codeStore,
		Sessions: sessionSvc, Now: now, Log: log, MaxOwned: cfg.MaxProjects, NoLocal: !servesLocal})
	// A sign-in or a membership ended here stops being believed on every
	// instance at once.
	followers := &sync.WaitGroup{}
	ended := &endedSessions{sessions: sessionSvc, runtime: runtime, log: log}
	for topic, f := range map[string]forgetter{"auth.forget": authSvc, "projects.forget": projectSvc, "sessions.ended": ended} {
		if err := shareForgets(shared, topic, f, followers, log); err != nil {
			shared.Close()
			return nil, err
		}
	}
	// A disabled person's sessions end, and their shells and commands
	// with them.
	people := auth.NewPeople(authSvc, recorder, sessionSvc, log)
	// A Change queued on any instance wakes every instance's verifier at
	// once; a gap of the bus may have lost a wake-up, so it wakes them too.
	queued, err := shared.Subscribe(changesQueued)
	if err != nil {
		shared.Close()
		return nil, err
	}
	wakeups := make(chan struct{}, 1)
	followers.Go(func() { // ends when the bus closes (App.Close)
		for {
			select {
			case _, ok := <-queued.Messages():
				if !ok {
					return
				}
			case <-queued.Gaps():
			}
			select {
			case wakeups <- struct{}{}:
			default:
			}
		}
	})
	changeSvc := changes.New(changes.Options{DB: store, Git: git, Code: codeStore, Workspace: ws,
		Sessions: sessionSvc, Checks: runtime, Events: recorder, Now: now, Log: log, Instance: instance,
		Wakeups: wakeups, Queued: func() {
			if err := shared.Publish(context.Background(), changesQueued, []byte("1")); err != nil {
				log.Warn("other instances not told of a queued Change; they find it at their next poll", "err", err)
			}
		}})
	metered.Read(metrics.Sources{Meter: usage, Store: store, Terminals: terms, Streams: streams, Commands: runtime,
		Changes: changeSvc})
	// A request about a session another instance runs is handed to it,
	// when the instances share a secret and say where they are.
	var forward handlers.Forwarder
	var toPeers *http.Transport
	var toLocalHome *localHome
	if cfg.forwardAddress() != "" {
		toPeers = forwardTransport()
		fw := &forwarder{secret: []byte(cfg.ClusterSecret), from: instance, now: time.Now, log: log,
			transport: toPeers, adapter: handlers.Adapter{Render: render, Log: log}}
		forward = fw
		if here, elsewhere := cfg.localHome(); !here {
			toLocalHome = newLocalHome(elsewhere, fw, store)
		}
	} else if here, _ := cfg.localHome(); !here {
		toLocalHome = newLocalHome("", nil, store)
	}
	a := &App{
		objects:      objects,
		Auth:         authSvc,
		Projects:     projectSvc,
		EditSessions: sessionSvc,
		Runtime:      runtime,
		Shells:       shells,
		Recordings:   recordings,
		Events:       recorder,
		Bus:          shared,
		followers:    followers,
		toPeers:      toPeers,
		localHome:    toLocalHome,
		Meter:        usage,
		Sandbox:      box,
		Instance:     instance,
		Instances: instances.New(instances.Options{DB: store, Meter: usage, ID: instance, Now: now, Log: log,
			Place: hostname() + ":" + cfg.SandboxArea, PlaceLock: cfg.InstanceLock(), Address: cfg.forwardAddress(),
			Shared: cfg.InstancesDir(), Revived: shells.Abandon}),
		Terminals: terms,
		Changes:   changeSvc,
		Code:      codeStore,
		log:       log,
		adapter:   handlers.Adapter{Render: render, Log: log},
		cookies:   auth.Cookies{AlwaysSecure: cfg.SecureCookies},
		health:    &handlers.Health{Ping: store.Ping},
		projects:  &handlers.Projects{Render: render, Projects: projectSvc, Meter: usage, Recordings: recordings},
		users:     &handlers.Users{Render: render, Auth: authSvc, People: people, Store: store, Secure: cfg.SecureCookies},
		account:   &handlers.Account{Render: render, People: people},
		code: &handlers.Code{Render: render, Projects: projectSvc, Code: codeSvc,
			MaxImportBytes: cfg.MaxImportBytes, UploadDir: cfg.UploadDir(), Meter: usage, Log: log},
		edit: &handlers.EditSessions{Render: render, Projects: projectSvc, Sessions: sessionSvc,
			Runtime: runtime, Shells: shells, Recordings: recordings, Idle: cfg.Sessions.Idle, Now: now, CommandHint: commandHint(box), Forward: forward,
			Heartbeat: terms.Config().Heartbeat},
		admin: &handlers.Dashboard{Render: render, Meter: usage, Sessions: sessionSvc, Runtime: runtime,
			Shells: shells, Events: recorder, Store: store,
			MaxProjectBytes: codeStore.MaxProjectBytes(), CollectGrace: cfg.CollectGrace},
		changes: &handlers.Changes{Render: render, Projects: projectSvc, Changes: changeSvc, Code: codeSvc,
			Events: recorder},
		maxImportBytes: cfg.MaxImportBytes,
		inputBytes:     terms.Config().InputBytes,
		streams:        streams,
		openStreams:    openStreams(cfg, streams, store, instance, now, log),
		searches:       limits.NewSearches(),
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

// forgetter is a service that remembers what it read for a while
// (auth's sign-ins, projects' memberships) and forgets it when it changes.
type forgetter interface {
	TellPeers(tell func(ctx context.Context, forgotten string))
	Forget(forgotten string)
	ForgetAll()
}

// shareForgets publishes on b, under topic, what f forgets, and has f
// forget what any instance published there, its own again included
// (forgetting twice is harmless). A gap may have lost some: f forgets
// everything. The goroutine, counted in followers, ends when b closes.
func shareForgets(b bus.Bus, topic string, f forgetter, followers *sync.WaitGroup, log *slog.Logger) error {
	sub, err := b.Subscribe(topic)
	if err != nil {
		return err
	}
	f.TellPeers(func(ctx context.Context, forgotten string) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := b.Publish(ctx, topic, []byte(forgotten)); err != nil {
			log.Warn("other instances were not told of a change here; they catch up at their next periodic check",
				"topic", topic, "err", err)
		}
	})
	followers.Go(func() {
		for {
			select {
			case m, ok := <-sub.Messages():
				if !ok {
					return
				}
				f.Forget(string(m.Payload))
			case <-sub.Gaps():
				f.ForgetAll()
			}
		}
	})
	return nil
}

// openStreams is how a person's open event streams are bounded: by this
// instance's gate alone when it runs alone, which costs a stream no
// query, and with a row per stream in the database when several
// instances serve together (ClusterSecret).
func openStreams(cfg Config, local *limits.Gate[int64], store *models.Store, instance string, now func() time.Time, log *slog.Logger) handlers.Holder {
	if cfg.ClusterSecret == "" {
		return local
	}
	return &accountStreams{local: local, db: store, instance: instance, now: now, log: log}
}

// endedSessions ends here what this instance keeps of sessions that ended
// on another one: a session's end through any instance stops its shells
// and commands on the instance that runs them within a moment. A gap may
// have lost some ends: every session held here is looked at again.
type endedSessions struct {
	sessions *editsession.Sessions
	runtime  *workbench.Runtime
	log      *slog.Logger
}

// endWait bounds how long ending one session's processes here may take.
const endWait = time.Minute

func (e *endedSessions) TellPeers(tell func(ctx context.Context, sessionID string)) {
	e.sessions.TellPeers(tell)
}

func (e *endedSessions) Forget(sessionID string) { e.end(sessionID) }

func (e *endedSessions) ForgetAll() { e.end(e.runtime.HeldSessions()...) }

func (e *endedSessions) end(ids ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), endWait)
	defer cancel()
	if err := e.sessions.EndedElsewhere(ctx, ids...); err != nil {
		e.log.Warn("a session ended elsewhere still runs something here", "err", err)
	}
}

// kubeAccess is how the kube provider reaches its cluster.
type kubeAccess struct {
	rest *rest.Config
	api  dynamic.Interface // nil: the API server rest reaches
}

// kubeProvider reaches the cluster as a pod does when the server runs in
// one (its ServiceAccount's token), else as KUBECONFIG says, unless the
// tests' rig stands for it.
func kubeProvider(cfg kube.Config, rig *kubeAccess, store *models.Store, log *slog.Logger) (*kube.Provider, error) {
	// client-go logs through klog, one logger for the whole process, and
	// as errors even streams closed on purpose: into the server's log, at
	// Debug.
	klog.SetSlogLogger(slog.New(asDebug{log.Handler()}).With("from", "client-go"))
	if rig != nil {
		return kube.New(cfg, rig.rest, rig.api, workbench.SandboxesInUse(store), log)
	}
	rc, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("server: the cluster for sandboxes: %w", err)
	}
	return kube.New(cfg, rc, nil, workbench.SandboxesInUse(store), log)
}

// asDebug passes every record on at Debug.
type asDebug struct{ slog.Handler }

func (h asDebug) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h asDebug) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h asDebug) WithAttrs(as []slog.Attr) slog.Handler { return asDebug{h.Handler.WithAttrs(as)} }
func (h asDebug) WithGroup(name string) slog.Handler    { return asDebug{h.Handler.WithGroup(name)} }

// commandHint is an example command that works in the sandbox: Go's
// tests when Go is on this host's jail's PATH, else a listing (a
// cluster's image is not known here).
func commandHint(box *sandbox.Sandbox) string {
	if box != nil && box.Has("go") {
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
