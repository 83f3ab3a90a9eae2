// Package server wires Atelier together: configuration, the database, the
// router and its middleware, and the process's start and shutdown.
package server

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"atelier/models"
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
	return cfg, nil
}

// PostgresDir is where the embedded cluster lives.
func (c Config) PostgresDir() string { return filepath.Join(c.DataDir, "postgres") }

func or(v, fallback string) string {
	if v == "" {
		return fallback
	}
	return v
}

// shutdownGrace bounds how long in-flight requests may finish after a signal.
const shutdownGrace = 10 * time.Second
