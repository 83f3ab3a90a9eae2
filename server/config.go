// Package server wires Atelier together: configuration, the database, the
// router and its middleware, and the process's start and shutdown.
package server

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"

	"atelier/editsession"
	"atelier/meter"
	"atelier/models"
	"atelier/sandbox"
	"atelier/storage"
	"atelier/workspace"
)

// Config is everything the operator can set, read once from the environment.
type Config struct {
	Addr           string // ATELIER_ADDR
	DataDir        string // ATELIER_DATA, absolute
	DatabaseURL    string // DATABASE_URL; empty starts the embedded PostgreSQL
	AdminPassword  string // ATELIER_ADMIN_PASSWORD, used once for the first admin
	WorkspacesRoot string // PROJECT_WORKSPACES_ROOT, absolute
	SecureCookies  bool   // ATELIER_SECURE_COOKIES: the site is served over TLS by a proxy
	Pool           models.Pool
	S3             storage.S3Config   // ATELIER_S3_*; empty Endpoint keeps objects in <data>/objects
	MaxImportBytes int64              // ATELIER_IMPORT_MAX_BYTES: largest archive an import accepts
	Sessions       editsession.Config // CODE_SESSION_IDLE_MS, CODE_SESSION_MAX_MS
	Sandbox        sandbox.Config     // ATELIER_SANDBOX_UID_BASE, _UID_COUNT, _ALLOW_CIDRS, _RO_PATHS, _PATH
	SandboxCap     int64              // SANDBOX_MONTHLY_SECONDS: each project's default monthly cap
	LocalRoots     []string           // ATELIER_LOCAL_ROOTS: where everyone but site admins may make Local projects
	// InContainer says the server runs in a container, detected at load;
	// the hints for a folder it cannot see speak of mounts only then.
	InContainer bool
	// SandboxMaxRunning (ATELIER_SANDBOX_MAX_RUNNING) bounds the commands
	// this instance runs at once; SandboxDiskBytes
	// (ATELIER_SANDBOX_DISK_BYTES) each session's disk, 0 for none.
	// ATELIER_SANDBOX_MEMORY_TOTAL is Sandbox.MaxMemoryTotal.
	SandboxMaxRunning int
	SandboxDiskBytes  int64

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
	MaxProjects    int // ATELIER_MAX_PROJECTS_PER_USER: projects one person may own

	// ImportAllowNetworks (ATELIER_IMPORT_ALLOW_CIDRS) are internal networks
	// git sources of people other than site admins may still come from.
	ImportAllowNetworks []netip.Prefix

	// MetricsToken (ATELIER_METRICS_TOKEN) lets a scraper read /metrics
	// with "Authorization: Bearer <token>"; empty: only site admins can.
	MetricsToken string
}

// LoadConfig reads the configuration through getenv (os.Getenv in main).
func LoadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		Addr:          or(getenv("ATELIER_ADDR"), "127.0.0.1:8080"),
		DatabaseURL:   getenv("DATABASE_URL"),
		AdminPassword: getenv("ATELIER_ADMIN_PASSWORD"),
		Pool:          models.DefaultPool,
		InContainer:   workspace.InContainer(),
	}
	var err error
	if cfg.DataDir, err = filepath.Abs(or(getenv("ATELIER_DATA"), "data")); err != nil {
		return cfg, fmt.Errorf("config: ATELIER_DATA: %w", err)
	}
	root := getenv("PROJECT_WORKSPACES_ROOT")
	if root == "" {
		root = filepath.Join(cfg.DataDir, "workspaces")
	}
	if !filepath.IsAbs(root) {
		return cfg, fmt.Errorf("config: PROJECT_WORKSPACES_ROOT must be an absolute path, got %q", root)
	}
	cfg.WorkspacesRoot = filepath.Clean(root)
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
	cfg.MaxImportBytes = 100 << 20
	if v := getenv("ATELIER_IMPORT_MAX_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<10 {
			return cfg, fmt.Errorf("config: ATELIER_IMPORT_MAX_BYTES must be a number of bytes (at least 1024), got %q", v)
		}
		cfg.MaxImportBytes = n
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
	cfg.SandboxDiskBytes = editsession.DefaultDiskBytes
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
	return cfg, nil
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

// SandboxDir holds the execution areas of Local projects (a Container
// project's is its managed folder).
func (c Config) SandboxDir() string { return filepath.Join(c.DataDir, "sandboxes") }

// SandboxDiskDir holds the images of sessions' disks.
func (c Config) SandboxDiskDir() string { return filepath.Join(c.DataDir, "sandbox-disks") }

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
