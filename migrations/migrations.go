// Package migrations holds the numbered SQL files that build Atelier's schema
// and applies them with golang-migrate. The schema is never built by GORM.
package migrations

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

//go:embed *.sql
var files embed.FS

var (
	// ErrDirty means a migration failed half-way; a person must repair the
	// schema and then record the version with `migrate force N`.
	ErrDirty = errors.New("migrations: schema is dirty")
	// ErrNewerSchema means the database was migrated by a newer Atelier.
	ErrNewerSchema = errors.New("migrations: schema is newer than this binary")
)

// Status is where a database stands relative to the embedded files.
type Status struct {
	Version uint // 0 when nothing was applied
	Dirty   bool
	Latest  uint // the highest version this binary knows
}

// Up checks that the schema is one this binary knows, then applies every
// pending migration. It is safe to run from several processes at once: the
// driver serialises them with an advisory lock.
func Up(dsn string) (Status, error) {
	return run(dsn, func(m *migrate.Migrate, st Status) error {
		if err := refuseUnknown(st); err != nil {
			return err
		}
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrations: up: %w", err)
		}
		return nil
	})
}

// Down reverts every migration. Tests use it to prove the down files work.
func Down(dsn string) (Status, error) {
	return run(dsn, func(m *migrate.Migrate, _ Status) error {
		if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrations: down: %w", err)
		}
		return nil
	})
}

// Force records version as applied and clean, after a person repaired a
// dirty schema by hand.
func Force(dsn string, version int) (Status, error) {
	return run(dsn, func(m *migrate.Migrate, _ Status) error {
		if err := m.Force(version); err != nil {
			return fmt.Errorf("migrations: force %d: %w", version, err)
		}
		return nil
	})
}

func refuseUnknown(st Status) error {
	if st.Dirty {
		return fmt.Errorf("%w at version %d: repair it by hand, then run `atelier migrate force %d`", ErrDirty, st.Version, st.Version)
	}
	if st.Version > st.Latest {
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d", ErrNewerSchema, st.Version, st.Latest)
	}
	return nil
}

// run opens its own connection because the migrate driver closes the pool it
// is given.
func run(dsn string, step func(*migrate.Migrate, Status) error) (st Status, err error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return st, fmt.Errorf("migrations: source: %w", err)
	}
	if st.Latest, err = latest(src); err != nil {
		return st, err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return st, fmt.Errorf("migrations: open: %w", err)
	}
	driver, err := pgx.WithInstance(db, &pgx.Config{})
	if err != nil {
		db.Close()
		return st, fmt.Errorf("migrations: driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx", driver)
	if err != nil {
		driver.Close()
		return st, fmt.Errorf("migrations: %w", err)
	}
	defer m.Close()

	if st.Version, st.Dirty, err = version(m); err != nil {
		return st, err
	}
	if err := step(m, st); err != nil {
		return st, err
	}
	st.Version, st.Dirty, err = version(m)
	return st, err
}

func version(m *migrate.Migrate) (uint, bool, error) {
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrations: version: %w", err)
	}
	return v, dirty, nil
}

func latest(src source.Driver) (uint, error) {
	v, err := src.First()
	if err != nil {
		return 0, fmt.Errorf("migrations: no migration files: %w", err)
	}
	for {
		next, err := src.Next(v)
		if errors.Is(err, fs.ErrNotExist) {
			return v, nil
		}
		if err != nil {
			return 0, fmt.Errorf("migrations: reading files: %w", err)
		}
		v = next
	}
}
