package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"atelier/migrations"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func exec(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func tableExists(t *testing.T, dsn, table string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestUpDownUp(t *testing.T) {
	dsn := pgtest.NewDatabase(t, "")
	st, err := migrations.Up(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != st.Latest || st.Dirty || st.Latest == 0 {
		t.Fatalf("after up: %+v", st)
	}
	if !tableExists(t, dsn, "projects") {
		t.Fatal("projects table missing after up")
	}
	if st, err = migrations.Down(dsn); err != nil || st.Version != 0 {
		t.Fatalf("down: %+v, %v", st, err)
	}
	for _, table := range []string{"users", "login_sessions", "projects", "project_members", "stored_objects", "published_commits", "events", "code_sessions", "code_session_files", "code_session_commands", "usage_counters", "sandbox_awake", "sandbox_reservations", "terminals", "owner_invitations", "password_resets", "sign_in_records"} {
		if tableExists(t, dsn, table) {
			t.Fatalf("%s survived down", table)
		}
	}
	if st, err = migrations.Up(dsn); err != nil || st.Version != st.Latest {
		t.Fatalf("second up: %+v, %v", st, err)
	}
	// Up on an up-to-date schema changes nothing and is not an error.
	if _, err := migrations.Up(dsn); err != nil {
		t.Fatalf("idempotent up: %v", err)
	}
}

func TestRefusesDirtySchema(t *testing.T) {
	dsn := pgtest.NewDatabase(t, "")
	st, err := migrations.Up(dsn)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, "UPDATE schema_migrations SET dirty = true")
	if _, err := migrations.Up(dsn); !errors.Is(err, migrations.ErrDirty) {
		t.Errorf("Up on a dirty schema: err = %v, want ErrDirty", err)
	}
	if _, err := migrations.Force(dsn, int(st.Latest)); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(dsn); err != nil {
		t.Fatalf("after force: %v", err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.NewDatabase(t, "")
	if _, err := migrations.Up(dsn); err != nil {
		t.Fatal(err)
	}
	exec(t, dsn, "UPDATE schema_migrations SET version = 9999")
	if _, err := migrations.Up(dsn); !errors.Is(err, migrations.ErrNewerSchema) {
		t.Fatalf("Up on a newer schema: err = %v, want ErrNewerSchema", err)
	}
}
