package pgtest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %q: %v", dsn, err)
	}
	return conn
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	conn := connect(t, AdminDSN())
	defer closeConn(conn)
	var exists bool
	err := conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestAdminDSN(t *testing.T) {
	conn := connect(t, AdminDSN())
	defer closeConn(conn)
	var db string
	if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if db != maintenanceDB {
		t.Errorf("AdminDSN connects to %q, want %q", db, maintenanceDB)
	}
}

func TestNewDatabaseIsFreshAndDropped(t *testing.T) {
	var (
		names []string
		open  []*pgx.Conn
	)
	t.Run("inner", func(t *testing.T) {
		for range 2 {
			conn := connect(t, NewDatabase(t, ""))
			open = append(open, conn) // left open past the test on purpose
			ctx := context.Background()
			var name string
			var tables int
			err := conn.QueryRow(ctx, "SELECT current_database(), (SELECT count(*) FROM pg_tables WHERE schemaname = 'public')").Scan(&name, &tables)
			if err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Errorf("database %s has %d tables, want a fresh one", name, tables)
			}
			if _, err := conn.Exec(ctx, "CREATE TABLE mine (v int)"); err != nil {
				t.Fatal(err) // would fail in the second database if it were the first
			}
			names = append(names, name)
		}
	})
	defer func() {
		for _, conn := range open {
			closeConn(conn)
		}
	}()

	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("databases = %v, want two different ones", names)
	}
	for _, name := range names {
		if !strings.Contains(name, "inner") {
			t.Errorf("database name %q does not tell the test", name)
		}
		// The cleanup ran while a connection was open: only WITH (FORCE)
		// drops the database then.
		if databaseExists(t, name) {
			t.Errorf("database %s still exists after its test", name)
		}
	}
}

func TestNewDatabaseFromTemplate(t *testing.T) {
	const template = "pgtest_template"
	ctx := context.Background()
	adminExec := func(sql string) error {
		admin := connect(t, AdminDSN())
		defer closeConn(admin)
		_, err := admin.Exec(ctx, sql)
		return err
	}
	if err := adminExec("CREATE DATABASE " + template); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := adminExec("DROP DATABASE " + template + " WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})

	seed := connect(t, cluster.DSN(template))
	_, err := seed.Exec(ctx, "CREATE TABLE migrated (v text); INSERT INTO migrated VALUES ('seeded')")
	closeConn(seed) // a template must have no connections while copied
	if err != nil {
		t.Fatal(err)
	}

	conn := connect(t, NewDatabase(t, template))
	defer closeConn(conn)
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM migrated").Scan(&v); err != nil || v != "seeded" {
		t.Errorf("copy of the template: v = %q, %v", v, err)
	}
}

func TestNewDatabaseInParallel(t *testing.T) {
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			conn := connect(t, NewDatabase(t, ""))
			defer closeConn(conn)
			if _, err := conn.Exec(context.Background(), "CREATE TABLE mine (v int)"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// fatalRecorder stands in for a test to catch what NewDatabase reports.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestNewDatabaseWithoutMain(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		newDatabase(rec, nil, "")
		rec.msg = "returned without failing"
	}()
	<-done
	if !strings.Contains(rec.msg, "TestMain must call pgtest.Main") {
		t.Errorf("NewDatabase without Main said %q", rec.msg)
	}
}
