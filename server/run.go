package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"atelier/migrations"
	"atelier/models"
	"atelier/pgembed"
)

// Database is the PostgreSQL Atelier talks to: the operator's (DATABASE_URL)
// or the embedded cluster under the data dir.
type Database struct {
	DSN     string
	cluster *pgembed.Cluster // nil for DATABASE_URL
}

// OpenDatabase returns the configured database, starting the embedded
// cluster when DATABASE_URL is not set. When a server of ours already runs
// the cluster, it is shared (so `user add` works beside a running server).
func OpenDatabase(ctx context.Context, cfg Config, log *slog.Logger) (*Database, error) {
	if cfg.DatabaseURL != "" {
		return &Database{DSN: cfg.DatabaseURL}, nil
	}
	// 0711: the cluster's own account must pass through to <data>/postgres,
	// but nobody else may list the data dir.
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	cluster, err := pgembed.Start(ctx, pgembed.Config{Dir: cfg.PostgresDir(), Database: "atelier", Logger: log})
	if err != nil {
		return nil, err
	}
	if cluster.Owned() {
		log.Info("embedded PostgreSQL started", "dir", cfg.PostgresDir())
	}
	return &Database{DSN: cluster.DSN("atelier"), cluster: cluster}, nil
}

// Close stops the embedded cluster if this process started it.
func (d *Database) Close(ctx context.Context) error {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.Stop(ctx)
}

// publishRetryEvery is how often canonical commits the object store lacks
// are published again; a pass that finds none is one small query.
const publishRetryEvery = 15 * time.Second

// Run serves Atelier until ctx ends, then shuts down in order: stop taking
// requests, let in-flight ones finish, close the pool, stop PostgreSQL.
func Run(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) (err error) {
	db, err := OpenDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cerr := db.Close(stopCtx); cerr != nil {
			err = errors.Join(err, cerr)
		} else if db.cluster != nil && db.cluster.Owned() {
			log.Info("embedded PostgreSQL stopped")
		}
	}()

	if _, err := migrations.Up(db.DSN); err != nil {
		return err
	}
	store, err := models.Open(ctx, db.DSN, cfg.Pool)
	if err != nil {
		return err
	}
	defer store.Close()

	app, err := New(ctx, cfg, store, log, time.Now)
	if err != nil {
		return err
	}
	defer app.Sandbox.Close()
	// What a previous process of this server left running or reserved.
	if n, err := app.Meter.SettleAbandoned(ctx, app.Instance); err != nil {
		return err
	} else if n > 0 {
		log.Info("sandbox reservations of a previous run settled", "count", n)
	}
	if err := app.Runtime.KillLeftovers(ctx); err != nil {
		log.Warn("processes of a previous run not all killed", "err", err)
	}
	// Before serving, so no Local folder is read unconfirmed.
	if err := app.Projects.RecordLocalIdentities(ctx); err != nil {
		return err
	}
	created, password, err := app.Auth.EnsureFirstAdmin(ctx, cfg.AdminPassword)
	if err != nil {
		return err
	}
	if created && cfg.AdminPassword == "" {
		fmt.Fprintf(stdout, "First start: sign in as admin with password %s (shown only this once)\n", password)
	}

	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	srv := newHTTPServer(cfg, app.Handler)
	fmt.Fprintf(stdout, "Atelier is serving on http://%s (data in %s)\n", ln.Addr(), cfg.DataDir)

	go app.sweepLoginSessions(ctx, store)
	go app.EditSessions.Run(ctx)
	go app.Runtime.Run(ctx)
	go app.Shells.Run(ctx)
	go app.Projects.KeepPublished(ctx, publishRetryEvery)
	// A Change a previous run left verifying is verified again.
	if n, err := app.Changes.Resume(ctx); err != nil {
		log.Warn("changes left verifying not queued", "err", err)
	} else if n > 0 {
		log.Info("changes queued for verification again", "count", n)
	}
	go app.Changes.Run(ctx)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Live streams never finish on their own; closing the bus and the
	// shells ends them so Shutdown only waits for ordinary requests.
	// Shells do not survive the process.
	app.Events.Close()
	app.Terminals.Close()
	defer app.Shells.Wait() // before the pool closes: the shells' time settles
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// sweepLoginSessions deletes expired sign-ins every hour until ctx ends.
func (a *App) sweepLoginSessions(ctx context.Context, store *models.Store) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if n, err := store.DeleteExpiredLoginSessions(ctx, time.Now()); err != nil && ctx.Err() == nil {
			a.log.Warn("sweeping expired sign-ins failed", "err", err)
		} else if n > 0 {
			a.log.Info("expired sign-ins removed", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
