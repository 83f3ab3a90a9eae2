// Package pgtest gives the tests of other packages a real PostgreSQL: the
// package's TestMain calls Main, which starts a private cluster for the test
// binary, and each test takes a fresh database of its own from NewDatabase.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtest.NewDatabase(t, "")
//		...
//	}
package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"atelier/pgembed"
)

// maintenanceDB is the database every cluster has; the cluster is started
// with it as Config.Database so that no other one is made.
const maintenanceDB = "postgres"

var (
	// cluster is set by Main before the tests run and never changes while
	// they do.
	cluster *pgembed.Cluster
	seq     atomic.Int64
)

// Main starts a private cluster for this test binary in a fresh temporary
// folder, runs the tests, stops the cluster, removes the folder and exits with
// the tests' code. The postmaster dies with the test binary, even when that is
// killed by a test timeout.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main for a TestMain with more to do around it: it returns the
// exit code instead of exiting.
func Run(m *testing.M) int {
	base, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	defer os.RemoveAll(base)
	// MkdirTemp makes the folder 0700; the cluster user must pass through
	// it when the tests run as root.
	if err := os.Chmod(base, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgembed.Start(ctx, pgembed.Config{
		Dir:           filepath.Join(base, "pg"),
		Database:      maintenanceDB,
		NoSync:        true,
		DieWithParent: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: start PostgreSQL:", err)
		return 1
	}
	cluster = c

	code := m.Run()

	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := c.Stop(stopCtx); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: stop PostgreSQL:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// AdminDSN returns the DSN of the cluster's maintenance database, where
// tests create their template databases. It is empty when Main was not
// called.
func AdminDSN() string {
	if cluster == nil {
		return ""
	}
	return cluster.DSN(maintenanceDB)
}

// DSN returns the DSN of database on the test binary's cluster; empty when
// Main was not called.
func DSN(database string) string {
	if cluster == nil {
		return ""
	}
	return cluster.DSN(database)
}

// NewDatabase creates an empty database, or a copy of template when it is not
// "", and returns its DSN. The database is dropped when the test ends, even
// if connections to it are still open. A template must have no connections
// while it is copied.
func NewDatabase(t testing.TB, template string) string {
	t.Helper()
	return newDatabase(t, cluster, template)
}

func newDatabase(t testing.TB, c *pgembed.Cluster, template string) string {
	t.Helper()
	if c == nil {
		t.Fatal("pgtest: no cluster; the package's TestMain must call pgtest.Main(m)")
		return ""
	}
	if template == "" {
		template = "template0"
	}
	name := fmt.Sprintf("test_%d_%s", seq.Add(1), slug(t.Name()))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := c.DSN(maintenanceDB)
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	if err := execAdmin(ctx, admin, sql); err != nil {
		t.Fatalf("pgtest: create database %s from %s: %v", name, template, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := execAdmin(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return c.DSN(name)
}

func execAdmin(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	_, err = conn.Exec(ctx, sql)
	return err
}

// slug turns a test name into a part of a database name that tells, in
// pg_stat_activity or a failure message, which test made it.
func slug(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if b.Len() >= 40 { // database names stop at 63 bytes
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
