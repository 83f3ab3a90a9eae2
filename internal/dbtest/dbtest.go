// Package dbtest gives tests a fresh, migrated database on the test binary's
// private cluster (pgtest). Each call clones a template that was migrated
// once, which costs a CREATE DATABASE instead of a full migration.
package dbtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"atelier/migrations"
	"atelier/models"
	"atelier/pgembed/pgtest"
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
