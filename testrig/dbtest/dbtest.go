// Package dbtest gives tests a fresh, migrated database on the test binary's
// private cluster (pgtest). Each call clones a template that was migrated
// once, which costs a CREATE DATABASE instead of a full migration.
package dbtest

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"atelier/migrations"
	"atelier/models"
	"atelier/testrig/pgtest"
)

const templateName = "atelier_migrated"

var (
	templateOnce sync.Once
	templateErr  error
)

// DSN returns the DSN of a fresh database with the whole schema applied.
func DSN(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() { templateErr = makeTemplate() })
	if templateErr != nil {
		t.Fatalf("dbtest: migrated template: %v", templateErr)
	}
	return pgtest.NewDatabase(t, templateName)
}

// Store returns a Store over a fresh, migrated database, closed at cleanup.
func Store(t testing.TB) *models.Store {
	t.Helper()
	s, err := models.Open(context.Background(), DSN(t), models.DefaultPool)
	if err != nil {
		t.Fatalf("dbtest: open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Statements counts what a Store sends to PostgreSQL, each statement a
// round trip: SQL statements apart from transaction control (BEGIN,
// COMMIT, ROLLBACK), which it counts on its own, and apart from both the
// statements sent on behalf of HTTP requests (Attribute).
type Statements struct {
	sql, control, requests atomic.Int64
}

// SQL is how many statements other than transaction control ran.
func (s *Statements) SQL() int64 { return s.sql.Load() }

// RequestSQL is how many statements other than transaction control ran
// under the context of a request that came through Attribute: what
// requests cost, without what a server does in the background meanwhile
// (heartbeats, warm-ups, events), which a test cannot time.
func (s *Statements) RequestSQL() int64 { return s.requests.Load() }

// requestMark marks a context as a request's, for RequestSQL.
type requestMark struct{}

// Attribute passes every request to next with its context marked, so the
// statements sent under it (or a context derived from it) count in
// RequestSQL.
func (s *Statements) Attribute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestMark{}, true)))
	})
}

// Control is how many BEGIN, COMMIT and ROLLBACK ran.
func (s *Statements) Control() int64 { return s.control.Load() }

// TraceQueryStart counts one statement; pgx calls it for every query and
// exec, those of database/sql's transactions included.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	word, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(d.SQL)), " ")
	switch word {
	case "begin", "commit", "rollback":
		s.control.Add(1)
	default:
		s.sql.Add(1)
		if ctx.Value(requestMark{}) != nil {
			s.requests.Add(1)
		}
	}
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (s *Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// CountedStore is Store whose every statement is counted, for tests that
// hold a request to a number of round trips.
func CountedStore(t testing.TB) (*models.Store, *Statements) {
	t.Helper()
	cfg, err := pgx.ParseConfig(DSN(t))
	if err != nil {
		t.Fatalf("dbtest: parse DSN: %v", err)
	}
	counter := &Statements{}
	cfg.Tracer = counter
	dsn := stdlib.RegisterConnConfig(cfg)
	s, err := models.Open(context.Background(), dsn, models.DefaultPool)
	if err != nil {
		t.Fatalf("dbtest: open: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		stdlib.UnregisterConnConfig(dsn)
	})
	return s, counter
}

func makeTemplate() error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.AdminDSN())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+templateName); err != nil {
		return err
	}
	_, err = migrations.Up(pgtest.DSN(templateName))
	return err
}
