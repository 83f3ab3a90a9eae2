// Package server wires Atelier together: configuration, the database, the
// router and its middleware, and the process's start and shutdown.
package server

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/api/resource"

	"golang.org/x/sys/unix"

	"atelier/code"
	"atelier/editsession"
	"atelier/events"
	"atelier/meter"
	"atelier/models"
	"atelier/sandbox"
	"atelier/sandbox/kube"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/terminal"
	"atelier/workbench"
)

// Config is everything the operator can set, read once from the environment.
type Config struct {
	Addr    string // ATELIER_ADDR
	DataDir string // ATELIER_DATA, absolute
	// SandboxArea (ATELIER_SANDBOX_AREA, absolute; DataDir by default)
	// holds what is this host's alone: sessions' folders, disks and
	// caches, and the lock that makes this process the one instance of
	// its place. Instances that share DataDir on one host need an area
	// each.
	SandboxArea string
	// InternalURL (ATELIER_INTERNAL_URL, e.g. http://10.0.0.5:8080) is
	// where other instances reach this one; ClusterSecret
	// (ATELIER_CLUSTER_SECRET, at least 32 bytes) is shared by all of
	// them. With both, a request about a session another instance runs is
	// handed to it; without, it is refused with session_elsewhere.
	InternalURL   string
	ClusterSecret string
	// LocalHost (ATELIER_LOCAL_HOST) is the InternalURL of the one
	// instance whose host has the Local projects' folders, among several
	// (with ClusterSecret). Requests about a Local project that reach
	// another instance are handed to it; with none named, Local projects
	// are refused on every instance. One instance alone serves them.
	LocalHost      string
	DatabaseURL    string // DATABASE_URL; empty starts the embedded PostgreSQL
	AdminPassword  string // ATELIER_ADMIN_PASSWORD, used once for the first admin
	WorkspacesRoot string // PROJECT_WORKSPACES_ROOT, absolute
	SecureCookies  bool   // ATELIER_SECURE_COOKIES: the site is served over TLS by a proxy
	Pool           models.Pool
	S3             storage.S3Config // ATELIER_S3_*; empty Endpoint keeps objects in <data>/objects
	MaxImportBytes int64            // ATELIER_IMPORT_MAX_BYTES: largest archive an import accepts
	// MaxExpandedBytes (ATELIER_IMPORT_MAX_EXPANDED_BYTES) bounds what one
	// archive unpacks to.
	MaxExpandedBytes int64
	Sessions         editsession.Config // CODE_SESSION_IDLE_MS, CODE_SESSION_MAX_MS
	Terminals        terminal.Config    // the defaults; tests shorten the heartbeat
	Sandbox          sandbox.Config     // ATELIER_SANDBOX_UID_BASE, _UID_COUNT, _ALLOW_CIDRS, _RO_PATHS, _PATH
	SandboxCap       int64              // SANDBOX_MONTHLY_SECONDS: each project's default monthly cap
	// Kube (ATELIER_SANDBOX_PROVIDER=kube, ATELIER_KUBE_*) runs sessions
	// in pods of a cluster; nil runs them in this host's jail.
	Kube *kube.Config
	// kubeRig, set by tests alone, is the cluster Kube reaches: a fake
	// API server and an exec server of the tests' own.
	kubeRig    *kubeAccess
	LocalRoots []string // ATELIER_LOCAL_ROOTS: where everyone but site admins may make Local projects
	// InContainer (ATELIER_IN_CONTAINER, set by Atelier's image) says the
	// server runs in Atelier's container, which sees only what compose.yaml
	// mounts into it: the hints for a folder it cannot see or write speak
	// of mounts there only then, and otherwise of the server's own file
	// system. Being in some container is not enough: a server started by
	// hand in a development container sees that container's files as its
	// own, and has no compose.yaml of Atelier's to change.
	InContainer bool
	// SandboxMaxRunning (ATELIER_SANDBOX_MAX_RUNNING) bounds the commands
	// this instance runs at once; SandboxDiskBytes
	// (ATELIER_SANDBOX_DISK_BYTES) each session's disk, 0 for none;
	// SandboxDiskTotal (ATELIER_SANDBOX_DISK_TOTAL) all sessions' disks
	// together, by default half the space free at start where they live.
	// ATELIER_SANDBOX_MEMORY_TOTAL is Sandbox.MaxMemoryTotal;
	// ATELIER_MAX_SESSIONS_PER_USER is Sessions.MaxPerUser.
	SandboxMaxRunning int
	SandboxDiskBytes  int64
	SandboxDiskTotal  int64
	// SandboxCacheBytes (ATELIER_SANDBOX_CACHE_BYTES) bounds each
	// project's cache, 0 for none; SandboxCacheTotal
	// (ATELIER_SANDBOX_CACHE_TOTAL) all of them on this host, by default a
	// quarter of the space free at start where they live.
	SandboxCacheBytes int64
	SandboxCacheTotal int64
	// RecordingMaxBytes (ATELIER_RECORDING_MAX_BYTES) bounds each terminal
	// recording's asciicast file; workbench.DefaultRecordingBytes by
	// default.
	RecordingMaxBytes int
	// SandboxCaptureBudget (ATELIER_SANDBOX_CAPTURE_MS) is how long the
	// capture after a command looks at its checkout.
	SandboxCaptureBudget time.Duration

	// Connections and bodies (see conns.go). TrustedProxies
	// (ATELIER_TRUSTED_PROXIES) are the proxies whose X-Forwarded-For is
	// believed and whose connections count only toward MaxConns.
	MaxConnsPerAddr int           // ATELIER_MAX_CONNS_PER_ADDR
	MaxConns        int           // ATELIER_MAX_CONNS; 0: what the descriptor limit allows
	AcceptRate      int           // ATELIER_ACCEPT_RATE: new connections a second past a burst; 0: unpaced
	BodyGrace       time.Duration // ATELIER_BODY_GRACE_MS
	BodyMinRate     int64         // ATELIER_BODY_MIN_RATE, bytes a second
	TrustedProxies  []netip.Prefix

	ImportsMax     int // ATELIER_IMPORTS_MAX: imports running at once on the instance
	ImportsPerHour int // ATELIER_IMPORTS_PER_HOUR: imports one person may start in an hour
	MaxProjects    int // ATELIER_MAX_PROJECTS_PER_USER: projects one person may create (and keep)

	// ImportAllowNetworks (ATELIER_IMPORT_ALLOW_CIDRS) are internal networks
	// git sources of people other than site admins may still come from.
	ImportAllowNetworks []netip.Prefix

	// MaxProjectBytes (ATELIER_PROJECT_MAX_BYTES) bounds a project's code:
	// the files of its canonical tree, each path counted.
	MaxProjectBytes int64
	// CollectGrace (ATELIER_COLLECT_GRACE_MS) is how long an object no live
	// tree needs stays before the collector deletes it, and the longest a
	// publish may take; the same on every instance of one database.
	CollectGrace time.Duration

	// MetricsToken (ATELIER_METRICS_TOKEN) lets a scraper read /metrics
	// with "Authorization: Bearer <token>"; empty: only site admins can.
	MetricsToken string

	// Events are the live bus's timings and bounds: no setting, the
	// defaults hold; tests shorten them.
	Events events.Config
	// LoopsGrace bounds how long a shutdown waits for the background loops
	// once their context ends: no setting, loopsGrace when zero; tests
	// shorten it.
	LoopsGrace time.Duration
}

// LoadConfig reads the configuration through getenv (os.Getenv in main).
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		Addr:          or(getenv("ATELIER_ADDR"), "127.0.0.1:8080"),
		DatabaseURL:   getenv("DATABASE_URL"),
		AdminPassword: getenv("ATELIER_ADMIN_PASSWORD"),
		Pool:          models.DefaultPool,
	}
	var err error
	if cfg.DataDir, err = filepath.Abs(or(getenv("ATELIER_DATA"), "data")); err != nil {
		return cfg, fmt.Errorf("config: ATELIER_DATA: %w", err)
	}
	if cfg.SandboxArea, err = filepath.Abs(or(getenv("ATELIER_SANDBOX_AREA"), cfg.DataDir)); err != nil {
		return cfg, fmt.Errorf("config: ATELIER_SANDBOX_AREA: %w", err)
	}
	cfg.InternalURL, cfg.ClusterSecret = getenv("ATELIER_INTERNAL_URL"), getenv("ATELIER_CLUSTER_SECRET")
	if cfg.InternalURL != "" {
		if u, err := url.Parse(cfg.InternalURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return cfg, fmt.Errorf("config: ATELIER_INTERNAL_URL must be http(s)://host:port, got %q", cfg.InternalURL)
		}
		cfg.InternalURL = strings.TrimSuffix(cfg.InternalURL, "/")
	}
	if cfg.LocalHost = strings.TrimSuffix(getenv("ATELIER_LOCAL_HOST"), "/"); cfg.LocalHost != "" {
		if u, err := url.Parse(cfg.LocalHost); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.Path != "" || u.RawQuery != "" || u.User != nil {
			return cfg, fmt.Errorf("config: ATELIER_LOCAL_HOST must be the ATELIER_INTERNAL_URL of one instance, http(s)://host:port, got %q", cfg.LocalHost)
		}
	}
	if cfg.ClusterSecret != "" && len(cfg.ClusterSecret) < 32 {
		return cfg, fmt.Errorf("config: ATELIER_CLUSTER_SECRET must be at least 32 bytes (e.g. openssl rand -hex 32)")
	}
	root := getenv("PROJECT_WORKSPACES_ROOT")
	if root == "" {
		root = filepath.Join(cfg.DataDir, "workspaces")
	}
	if !filepath.IsAbs(root) {
		return cfg, fmt.Errorf("config: PROJECT_WORKSPACES_ROOT must be an absolute path, got %q", root)
	}
	cfg.WorkspacesRoot = filepath.Clean(root)
	if v := getenv("ATELIER_IN_CONTAINER"); v != "" {
		if cfg.InContainer, err = strconv.ParseBool(v); err != nil {
			return cfg, fmt.Errorf("config: ATELIER_IN_CONTAINER: %w", err)
		}
	}
	if v := getenv("ATELIER_SECURE_COOKIES"); v != "" {
		if cfg.SecureCookies, err = strconv.ParseBool(v); err != nil {
			return cfg, fmt.Errorf("config: ATELIER_SECURE_COOKIES: %w", err)
		}
	}
	if v := getenv("ATELIER_DB_MAX_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			return cfg, fmt.Errorf("config: ATELIER_DB_MAX_CONNS must be a number of at least 2, got %q", v)
		}
		cfg.Pool.MaxOpen = n
		cfg.Pool.MaxIdle = min(cfg.Pool.MaxIdle, n)
	}
	cfg.S3 = storage.S3Config{
		Endpoint:  getenv("ATELIER_S3_ENDPOINT"),
		Bucket:    or(getenv("ATELIER_S3_BUCKET"), "atelier"),
		AccessKey: getenv("ATELIER_S3_ACCESS_KEY"),
		SecretKey: getenv("ATELIER_S3_SECRET_KEY"),
	}
	if v := getenv("ATELIER_S3_SECURE"); v != "" {
		if cfg.S3.Secure, err = strconv.ParseBool(v); err != nil {
			return cfg, fmt.Errorf("config: ATELIER_S3_SECURE: %w", err)
		}
	}
	// Several instances share what one keeps in its own folder when
	// alone: the database and the code trees.
	if cfg.ClusterSecret != "" && (cfg.DatabaseURL == "" || cfg.S3.Endpoint == "") {
		return cfg, fmt.Errorf("config: ATELIER_CLUSTER_SECRET runs several instances, which need a shared PostgreSQL (DATABASE_URL) and an S3 store (ATELIER_S3_ENDPOINT); set both, or unset the secret for one instance")
	}
	cfg.MaxImportBytes = 100 << 20
	if v := getenv("ATELIER_IMPORT_MAX_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<10 {
			return cfg, fmt.Errorf("config: ATELIER_IMPORT_MAX_BYTES must be a number of bytes (at least 1024), got %q", v)
		}
		cfg.MaxImportBytes = n
	}
	cfg.MaxExpandedBytes = code.DefaultMaxExpandedBytes
	if v := getenv("ATELIER_IMPORT_MAX_EXPANDED_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<20 {
			return cfg, fmt.Errorf("config: ATELIER_IMPORT_MAX_EXPANDED_BYTES must be a number of bytes (at least 1048576), got %q", v)
		}
		cfg.MaxExpandedBytes = n
	}
	cfg.MaxProjectBytes = codestore.DefaultMaxProjectBytes
	if v := getenv("ATELIER_PROJECT_MAX_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<20 {
			return cfg, fmt.Errorf("config: ATELIER_PROJECT_MAX_BYTES must be a number of bytes (at least 1 MiB, 1048576), got %q", v)
		}
		cfg.MaxProjectBytes = n
	}
	cfg.CollectGrace = codestore.DefaultGrace
	if v := getenv("ATELIER_COLLECT_GRACE_MS"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 1000 {
			return cfg, fmt.Errorf("config: ATELIER_COLLECT_GRACE_MS must be a number of milliseconds (at least 1000), got %q", v)
		}
		cfg.CollectGrace = time.Duration(ms) * time.Millisecond
	}
	if cfg.ImportAllowNetworks, err = networks(getenv, "ATELIER_IMPORT_ALLOW_CIDRS"); err != nil {
		return cfg, err
	}
	cfg.Sandbox = sandbox.Config{UIDBase: sandbox.DefaultUIDBase, UIDCount: sandbox.DefaultUIDCount}
	if cfg.Sandbox.AllowNetworks, err = networks(getenv, "ATELIER_SANDBOX_ALLOW_CIDRS"); err != nil {
		return cfg, err
	}
	cfg.SandboxCap = meter.DefaultCap
	cfg.SandboxMaxRunning = 2 * runtime.NumCPU()
	cfg.SandboxDiskBytes = sandbox.DefaultDiskBytes
	if v := getenv("ATELIER_SANDBOX_MAX_RUNNING"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("config: ATELIER_SANDBOX_MAX_RUNNING must be a number of commands (at least 1), got %q", v)
		}
		cfg.SandboxMaxRunning = n
	}
	if v := getenv("ATELIER_SANDBOX_DISK_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (n != 0 && n < sandbox.MinDiskBytes) {
			return cfg, fmt.Errorf("config: ATELIER_SANDBOX_DISK_BYTES must be a number of bytes (at least %d, or 0 for no bound), got %q", sandbox.MinDiskBytes, v)
		}
		cfg.SandboxDiskBytes = n
	}
	cfg.RecordingMaxBytes = workbench.DefaultRecordingBytes
	if v := getenv("ATELIER_RECORDING_MAX_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < terminal.MinRecordingBytes {
			return cfg, fmt.Errorf("config: ATELIER_RECORDING_MAX_BYTES must be a number of bytes, at least %d, got %q", terminal.MinRecordingBytes, v)
		}
		cfg.RecordingMaxBytes = n
	}
	cfg.SandboxCacheBytes = sandbox.DefaultCacheBytes
	if v := getenv("ATELIER_SANDBOX_CACHE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (n != 0 && n < sandbox.MinDiskBytes) {
			return cfg, fmt.Errorf("config: ATELIER_SANDBOX_CACHE_BYTES must be a number of bytes (at least %d, or 0 for no project caches), got %q", sandbox.MinDiskBytes, v)
		}
		cfg.SandboxCacheBytes = n
	}
	if cfg.SandboxCacheBytes > 0 {
		if cfg.SandboxCacheTotal, err = cacheTotal(getenv("ATELIER_SANDBOX_CACHE_TOTAL"), cfg.SandboxCacheBytes, cfg.SandboxCacheDir()); err != nil {
			return cfg, err
		}
	}
	if cfg.SandboxDiskTotal, err = diskTotal(getenv("ATELIER_SANDBOX_DISK_TOTAL"), cfg.SandboxDiskBytes, cfg.SandboxDiskDir()); err != nil {
		return cfg, err
	}
	cfg.SandboxCaptureBudget = workbench.DefaultCaptureBudget
	if v := getenv("ATELIER_SANDBOX_CAPTURE_MS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 100 || n > 600_000 {
			return cfg, fmt.Errorf("config: ATELIER_SANDBOX_CAPTURE_MS must be a number of milliseconds from 100 to 600000, got %q", v)
		}
		cfg.SandboxCaptureBudget = time.Duration(n) * time.Millisecond
	}
	if v := getenv("ATELIER_SANDBOX_MEMORY_TOTAL"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 64<<20 {
			return cfg, fmt.Errorf("config: ATELIER_SANDBOX_MEMORY_TOTAL must be a number of bytes (at least 64 MiB), got %q", v)
		}
		cfg.Sandbox.MaxMemoryTotal = n
	}
	for _, v := range []struct {
		name string
		set  func(uint64)
	}{
		{"ATELIER_SANDBOX_UID_BASE", func(n uint64) { cfg.Sandbox.UIDBase = uint32(n) }},
		{"ATELIER_SANDBOX_UID_COUNT", func(n uint64) { cfg.Sandbox.UIDCount = uint32(n) }},
		{"SANDBOX_MONTHLY_SECONDS", func(n uint64) { cfg.SandboxCap = int64(n) }},
	} {
		if raw := getenv(v.name); raw != "" {
			n, err := strconv.ParseUint(raw, 10, 32)
			if err != nil {
				return cfg, fmt.Errorf("config: %s must be a whole number, got %q", v.name, raw)
			}
			v.set(n)
		}
	}
	for name, list := range map[string]*[]string{"ATELIER_SANDBOX_RO_PATHS": &cfg.Sandbox.ROPaths, "ATELIER_SANDBOX_PATH": &cfg.Sandbox.Path} {
		for _, p := range strings.Split(getenv(name), ":") {
			if p == "" {
				continue
			}
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
				return cfg, fmt.Errorf("config: %s lists absolute folders below / written plainly, separated by colons; got %q", name, p)
			}
			*list = append(*list, p)
		}
	}
	for _, r := range strings.Split(getenv("ATELIER_LOCAL_ROOTS"), ":") {
		if r == "" {
			continue
		}
		if !filepath.IsAbs(r) || filepath.Clean(r) != r {
			return cfg, fmt.Errorf("config: ATELIER_LOCAL_ROOTS lists absolute folders written plainly, separated by colons; got %q", r)
		}
		cfg.LocalRoots = append(cfg.LocalRoots, r)
	}
	cfg.ImportsMax, cfg.ImportsPerHour, cfg.MaxProjects = 2, 30, 100
	for name, n := range map[string]*int{"ATELIER_IMPORTS_MAX": &cfg.ImportsMax,
		"ATELIER_IMPORTS_PER_HOUR": &cfg.ImportsPerHour, "ATELIER_MAX_PROJECTS_PER_USER": &cfg.MaxProjects} {
		if v := getenv(name); v != "" {
			if *n, err = strconv.Atoi(v); err != nil || *n < 1 {
				return cfg, fmt.Errorf("config: %s must be a whole number of at least 1, got %q", name, v)
			}
		}
	}
	if err := loadConnLimits(getenv, &cfg); err != nil {
		return cfg, err
	}
	cfg.Sessions = editsession.DefaultConfig
	if v := getenv("ATELIER_MAX_SESSIONS_PER_USER"); v != "" {
		if cfg.Sessions.MaxPerUser, err = strconv.Atoi(v); err != nil || cfg.Sessions.MaxPerUser < 1 {
			return cfg, fmt.Errorf("config: ATELIER_MAX_SESSIONS_PER_USER must be a whole number of at least 1, got %q", v)
		}
	}
	for name, d := range map[string]*time.Duration{"CODE_SESSION_IDLE_MS": &cfg.Sessions.Idle, "CODE_SESSION_MAX_MS": &cfg.Sessions.MaxAge} {
		if v := getenv(name); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 1000 {
				return cfg, fmt.Errorf("config: %s must be a number of milliseconds (at least 1000), got %q", name, v)
			}
			*d = time.Duration(ms) * time.Millisecond
		}
	}
	if cfg.MetricsToken, err = metricsToken(getenv("ATELIER_METRICS_TOKEN")); err != nil {
		return cfg, err
	}
	if cfg.Kube, err = kubeConfig(getenv, cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// kubeConfig reads the kube provider's settings when
// ATELIER_SANDBOX_PROVIDER=kube: nil for this host's jail, the default.
// Each pod is bounded by the settings that bound the local jail.
func kubeConfig(getenv func(string) string, cfg Config) (*kube.Config, error) {
	switch v := getenv("ATELIER_SANDBOX_PROVIDER"); v {
	case "", "local":
		return nil, nil
	case "kube":
	default:
		return nil, fmt.Errorf("config: ATELIER_SANDBOX_PROVIDER must be local or kube, got %q", v)
	}
	kc := kube.Config{
		Namespace:        getenv("ATELIER_KUBE_NAMESPACE"),
		Image:            getenv("ATELIER_KUBE_IMAGE"),
		Helper:           getenv("ATELIER_KUBE_HELPER"),
		RuntimeClass:     getenv("ATELIER_KUBE_RUNTIME_CLASS"),
		PoliciesEnforced: getenv("ATELIER_KUBE_NETWORK_POLICIES") == "enforced",
	}
	var err error
	if kc.ClusterNetworks, err = networks(getenv, "ATELIER_KUBE_CLUSTER_CIDRS"); err != nil {
		return nil, err
	}
	if v := getenv("ATELIER_KUBE_WARM_PODS"); v != "" {
		if kc.WarmPods, err = strconv.Atoi(v); err != nil || kc.WarmPods < 0 || kc.WarmPods > 1000 {
			return nil, fmt.Errorf("config: ATELIER_KUBE_WARM_PODS must be a count from 0 to 1000, got %q", v)
		}
	}
	if cfg.Sandbox.MaxMemory > 0 {
		kc.Memory = *resource.NewQuantity(cfg.Sandbox.MaxMemory, resource.BinarySI)
	}
	if cfg.SandboxDiskBytes > 0 {
		kc.WorkspaceMax = *resource.NewQuantity(cfg.SandboxDiskBytes, resource.BinarySI)
	}
	kc = kc.Defaults()
	if err := kc.Check(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &kc, nil
}

// diskShare divides the space free where sessions' disks live into what
// they may take together unless ATELIER_SANDBOX_DISK_TOTAL says: half
// leaves the database, the repositories and the logs that share the file
// system room to grow. On a host with 71 GiB free that is 35.5 GiB, 17
// sessions of 2 GiB.
const diskShare = 2

// cacheShare is the same for projects' caches
// (ATELIER_SANDBOX_CACHE_TOTAL): a quarter, so that with the sessions'
// half a quarter of what was free stays free.
const cacheShare = 4

// diskTotal reads ATELIER_SANDBOX_DISK_TOTAL: a number of bytes, at least
// one session's disk of each bytes (a smaller total would refuse every
// session), or 0 for no bound. Unset, it is 1/diskShare of what the file
// system holding area (or its nearest existing parent) has free now, at
// start: a figure that does not move while sessions fill their disks.
func diskTotal(v string, each int64, area string) (int64, error) {
	return spaceTotal("ATELIER_SANDBOX_DISK_TOTAL", "one session's disk", v, each, area, diskShare)
}

// cacheTotal reads ATELIER_SANDBOX_CACHE_TOTAL as diskTotal reads its
// variable, for projects' caches of each bytes.
func cacheTotal(v string, each int64, area string) (int64, error) {
	return spaceTotal("ATELIER_SANDBOX_CACHE_TOTAL", "one project's cache", v, each, area, cacheShare)
}

func spaceTotal(name, one, v string, each int64, area string, share int64) (int64, error) {
	if v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || (n != 0 && n < each) {
			return 0, fmt.Errorf("config: %s must be a number of bytes (at least %s, %d, or 0 for no bound), got %q", name, one, each, v)
		}
		return n, nil
	}
	for {
		var st unix.Statfs_t
		err := unix.Statfs(area, &st)
		if err == nil {
			return int64(st.Bavail) * st.Bsize / share, nil
		}
		if !errors.Is(err, unix.ENOENT) || area == filepath.Dir(area) {
			return 0, fmt.Errorf("config: the free space for %s at %s: %w", name, area, err)
		}
		area = filepath.Dir(area)
	}
}

// minMetricsToken is the shortest metrics token accepted: 16 random
// characters are beyond guessing, shorter ones are likely a word.
const minMetricsToken = 16

// metricsToken checks ATELIER_METRICS_TOKEN: empty, or at least
// minMetricsToken characters a bearer token may carry (RFC 6750's b64token:
// letters, digits and -._~+/=).
func metricsToken(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	ok := len(v) >= minMetricsToken
	for _, r := range v {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-._~+/=", r))) {
			ok = false
		}
	}
	if !ok {
		return "", fmt.Errorf("config: ATELIER_METRICS_TOKEN must have at least %d characters of A-Z a-z 0-9 -._~+/= (e.g. openssl rand -hex 32)", minMetricsToken)
	}
	return v, nil
}

// loadConnLimits reads the bounds on connections and request bodies.
func loadConnLimits(getenv func(string) string, cfg *Config) error {
	var err error
	if cfg.TrustedProxies, err = networks(getenv, "ATELIER_TRUSTED_PROXIES"); err != nil {
		return err
	}
	cfg.MaxConnsPerAddr, cfg.BodyGrace, cfg.BodyMinRate = defaultConnsPerAddr, defaultBodyGrace, defaultBodyMinRate
	cfg.AcceptRate = defaultAcceptRate
	for _, v := range []struct {
		name  string
		least int64
		set   func(int64)
	}{
		{"ATELIER_MAX_CONNS_PER_ADDR", 1, func(n int64) { cfg.MaxConnsPerAddr = int(n) }},
		{"ATELIER_MAX_CONNS", 1, func(n int64) { cfg.MaxConns = int(n) }},
		{"ATELIER_ACCEPT_RATE", 0, func(n int64) { cfg.AcceptRate = int(n) }},
		{"ATELIER_BODY_GRACE_MS", 100, func(n int64) { cfg.BodyGrace = time.Duration(n) * time.Millisecond }},
		{"ATELIER_BODY_MIN_RATE", 1, func(n int64) { cfg.BodyMinRate = n }},
	} {
		if raw := getenv(v.name); raw != "" {
			n, err := strconv.ParseInt(raw, 10, 32)
			if err != nil || n < v.least {
				return fmt.Errorf("config: %s must be a whole number of at least %d, got %q", v.name, v.least, raw)
			}
			v.set(n)
		}
	}
	return nil
}

// PostgresDir is where the embedded cluster lives.
func (c Config) PostgresDir() string { return filepath.Join(c.DataDir, "postgres") }

// GitDir is where the canonical repositories live.
func (c Config) GitDir() string { return filepath.Join(c.DataDir, "git") }

// ObjectsDir is the local object store, used when no S3 endpoint is set.
func (c Config) ObjectsDir() string { return filepath.Join(c.DataDir, "objects") }

// SandboxDir holds sessions' folders.
func (c Config) SandboxDir() string { return filepath.Join(c.SandboxArea, "sandboxes") }

// UploadDir is where uploaded archives wait for their import, in files
// with no name: the data's disk, which the operator sized, rather than a
// /tmp that may be memory.
func (c Config) UploadDir() string { return filepath.Join(c.DataDir, "uploads") }

// SandboxDiskDir holds the images of sessions' disks.
func (c Config) SandboxDiskDir() string { return filepath.Join(c.SandboxArea, "sandbox-disks") }

// SandboxBaseDir holds the trees of bases shared by the sessions of the
// same commit.
func (c Config) SandboxBaseDir() string { return filepath.Join(c.SandboxArea, "sandbox-bases") }

// SandboxCacheDir holds projects' caches, their images and where they are
// mounted.
func (c Config) SandboxCacheDir() string { return filepath.Join(c.SandboxArea, "sandbox-caches") }

// forwardAddress is where other instances hand this one requests: its
// InternalURL when the instances share a secret, else "" (nowhere).
func (c Config) forwardAddress() string {
	if c.ClusterSecret == "" {
		return ""
	}
	return c.InternalURL
}

// localHome says where Local projects are served: here (one instance
// alone, or the one LocalHost names), or at elsewhere ("" when no
// instance is named, and Local projects are refused).
func (c Config) localHome() (here bool, elsewhere string) {
	if c.ClusterSecret == "" || c.LocalHost != "" && c.LocalHost == c.InternalURL {
		return true, ""
	}
	return false, c.LocalHost
}

// InstanceLock is the file whose lock this process holds as the one
// instance of its sandbox area.
func (c Config) InstanceLock() string { return filepath.Join(c.SandboxArea, "instance.lock") }

// InstancesDir is where, in the data folder every instance shares, each
// live one keeps its locked probe (instances.Options.Shared).
func (c Config) InstancesDir() string { return filepath.Join(c.DataDir, "instances") }

func or(v, fallback string) string {
	if v == "" {
		return fallback
	}
	return v
}

// shutdownGrace bounds how long in-flight requests may finish after a signal.
const shutdownGrace = 10 * time.Second

// networks reads a list of CIDRs separated by commas or spaces.
func networks(getenv func(string) string, name string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, v := range strings.FieldsFunc(getenv(name), func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, fmt.Errorf("config: %s must list networks such as 10.0.0.0/8 or fd00::/8, got %q", name, v)
		}
		ps = append(ps, p.Masked())
	}
	return ps, nil
}
