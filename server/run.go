package server

import (
	"cmp"
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
	return openDatabase(ctx, cfg, log, false)
}

// openDatabase is OpenDatabase; with supervise, as the server needs it,
// the embedded cluster is this process's for as long as it lives: one a
// killed server left running is stopped and started again as ours, and
// one that dies is started again (pgembed.Config.Supervise). An operator's
// DATABASE_URL is the operator's to keep running.
func openDatabase(ctx context.Context, cfg Config, log *slog.Logger, supervise bool) (*Database, error) {
	if cfg.DatabaseURL != "" {
		return &Database{DSN: cfg.DatabaseURL}, nil
	}
	// 0711: the cluster's own account must pass through to <data>/postgres,
	// but nobody else may list the data dir.
	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	cluster, err := pgembed.Start(ctx, pgembed.Config{Dir: cfg.PostgresDir(), Database: "atelier", Logger: log,
		Supervise: supervise})
	if err != nil {
		return nil, err
	}
	if cluster.Owned() {
		log.Info("embedded PostgreSQL started", "dir", cfg.PostgresDir())
	}
	return &Database{DSN: cluster.DSN("atelier"), cluster: cluster}, nil
}

// Close stops the embedded cluster if this process runs it.
func (d *Database) Close(ctx context.Context) error {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.Stop(ctx)
}

// loopsGrace bounds how long a shutdown waits for the background loops
// once their context ends; each returns within a query or a check's kill.
const loopsGrace = 30 * time.Second

// publishRetryEvery is how often canonical commits the object store lacks
// are published again; a pass that finds none is one small query.
const publishRetryEvery = 15 * time.Second

// Run serves Atelier until ctx ends, then shuts down in order: stop taking
// requests, let in-flight ones finish, stop the background loops and wait
// for them, take down what runs for sessions (App.Close), close the pool,
// stop PostgreSQL. Nothing Run started runs once it returns, short of a
// loop that overstays its bounded wait (logged).
func Run(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) (err error) {
	db, err := openDatabase(ctx, cfg, log, true)
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
	// Once nothing is served, before the pool closes: the shells' time
	// settles and their changes are captured, then the sessions' mounts go.
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Close(closeCtx); err != nil {
			log.Warn("sessions' sandboxes not all taken down; the next start cleans them", "err", err)
		}
	}()
	if err := app.TakeOver(ctx); err != nil {
		return err
	}
	// Before serving, so no Local folder is read unconfirmed; only where
	// their folders are.
	if here, _ := cfg.localHome(); here {
		if err := app.Projects.RecordLocalIdentities(ctx); err != nil {
			return err
		}
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

	// Deferred after App.Close, so it runs first: the loops are done with
	// the sessions, the pool and the store before those close.
	bg := newLoops(ctx)
	defer func() {
		grace := cmp.Or(cfg.LoopsGrace, loopsGrace)
		if late := bg.Stop(grace); len(late) > 0 {
			log.Warn("background loops still run after the shutdown's wait; stopping without them",
				"loops", late, "waited", grace)
		}
	}()
	bg.Go("instance heartbeat", app.Instances.Run)
	bg.Go("sign-in sweep", func(ctx context.Context) { app.sweepLoginSessions(ctx, store) })
	bg.Go("session sweep", app.EditSessions.Run)
	bg.Go("idle checkouts", app.Runtime.Run)
	bg.Go("shell leases", app.Shells.Run)
	bg.Go("publisher", func(ctx context.Context) { app.Projects.KeepPublished(ctx, publishRetryEvery) })
	// What no live tree needs any more leaves the object store.
	bg.Go("collector", app.Code.KeepCollected)
	// It takes what a previous run left verifying from the database, as
	// it takes any instance's due checks.
	bg.Go("change verifier", app.Changes.Run)
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
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	// Serve returned as Shutdown began; its goroutine ends with it.
	<-serveErr
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// Close ends what the App runs for people, for a server that stops once it
// serves no request any more: the shells (Shells.Wait: their time settled,
// their changes captured; Recordings.Wait: their recordings stored), then every process, checkout and disk of the
// sessions (Runtime.Close), then the sandbox's cgroups, then the bus. The
// sessions stay open in the database, which must still be there, with
// their edits.
func (a *App) Close(ctx context.Context) error {
	err := a.Terminals.Close()
	a.Shells.Wait()
	a.Recordings.Wait() // the terminals' recordings ended with them
	err = errors.Join(err, a.Runtime.Close(ctx))
	if a.Sandbox != nil { // nil when sessions run in a cluster
		err = errors.Join(err, a.Sandbox.Close())
	}
	// The sessions it held are free for other instances once nothing of
	// them runs here; the bus goes last, once nothing here publishes.
	err = errors.Join(err, a.Instances.Stop(ctx), a.Bus.Close())
	a.followers.Wait()
	if c, ok := a.objects.(io.Closer); ok {
		err = errors.Join(err, c.Close())
	}
	if a.toPeers != nil {
		a.toPeers.CloseIdleConnections()
	}
	return err
}

// TakeOver makes this process the live instance of its sandbox area before
// it serves: what gone instances reserved is settled, and what earlier
// processes of this area left running or mounted for sessions is ended.
// Another live instance's sessions, reservations and processes are left
// alone.
func (a *App) TakeOver(ctx context.Context) error {
	gone, err := a.Instances.Start(ctx)
	if err != nil {
		return err
	}
	if err := a.Runtime.KillLeftovers(ctx, gone); err != nil {
		a.log.Warn("processes of a previous run not all killed", "err", err)
	}
	return nil
}

// sweepLoginSessions deletes expired sign-ins and reset links every hour
// until ctx ends.
func (a *App) sweepLoginSessions(ctx context.Context, store *models.Store) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if n, err := store.DeleteExpiredLoginSessions(ctx, time.Now()); err != nil && ctx.Err() == nil {
			a.log.Warn("sweeping expired sign-ins failed", "err", err)
		} else if n > 0 {
			a.log.Info("expired sign-ins removed", "count", n)
		}
		if _, err := store.DeleteExpiredPasswordResets(ctx, time.Now()); err != nil && ctx.Err() == nil {
			a.log.Warn("sweeping expired reset links failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
