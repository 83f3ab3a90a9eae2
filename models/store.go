// Package models holds Atelier's GORM structs and the Store with every query.
// Nothing outside this package sees gorm: callers get plain structs and the
// sentinel errors below.
package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"atelier/fault"
	"atelier/internal/txwatch"
)

var (
	ErrNotFound = fault.New(fault.NotFound, "not_found", "models: not found", "Not found.")
	// ErrConflict is a unique constraint; errors.As to *ConstraintError says which.
	ErrConflict = errors.New("models: already exists")
	// ErrInvalid is a row that breaks a rule of the schema, caught by the model
	// before PostgreSQL or by a CHECK in PostgreSQL itself.
	ErrInvalid = errors.New("models: invalid")
	// ErrUnavailable wraps a failure to reach PostgreSQL at all (refused,
	// restarting, the connection lost): the request fails at once with a
	// 503, and the pool connects again by itself once the server is back.
	ErrUnavailable = fault.New(fault.Unavailable, "database_unavailable", "models: the database is unavailable",
		"The database does not answer right now; try again in a moment.")
)

// ConstraintError names the constraint PostgreSQL refused.
type ConstraintError struct {
	Constraint string
	kind       error // ErrConflict or ErrInvalid
	err        error
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("%v: %s: %v", e.kind, e.Constraint, e.err)
}

func (e *ConstraintError) Is(target error) bool { return target == e.kind }
func (e *ConstraintError) Unwrap() error        { return e.err }

// Pool sets the connection pool's limits explicitly; database/sql's default
// is an unbounded pool that can exhaust max_connections under load.
type Pool struct {
	MaxOpen     int
	MaxIdle     int
	MaxLifetime time.Duration
	MaxIdleTime time.Duration
}

// DefaultPool fits the embedded cluster (max_connections 100) with room for
// the migration and CLI connections.
var DefaultPool = Pool{MaxOpen: 20, MaxIdle: 5, MaxLifetime: time.Hour, MaxIdleTime: 5 * time.Minute}

// Store runs every query of Atelier.
type Store struct {
	db  *gorm.DB
	dsn string // for connections outside the pool (Listener)
	// pinned is a Store whose every statement runs on one connection,
	// the one Exclusive holds: session locks taken through it are given
	// back on the connection that took them.
	pinned bool
}

// Open connects to dsn with the given pool limits. The schema must already be
// migrated.
func Open(ctx context.Context, dsn string, pool Pool) (*Store, error) {
	sqlDB, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("models: open: %w", err)
	}
	sqlDB.SetMaxOpenConns(pool.MaxOpen)
	sqlDB.SetMaxIdleConns(pool.MaxIdle)
	sqlDB.SetConnMaxLifetime(pool.MaxLifetime)
	sqlDB.SetConnMaxIdleTime(pool.MaxIdleTime)
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("models: connect: %w", err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		TranslateError:         false,
	})
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("models: gorm: %w", err)
	}
	if err := markUnavailable(db); err != nil {
		sqlDB.Close()
		return nil, err
	}
	return &Store{db: db, dsn: dsn}, nil
}

// markUnavailable makes every statement that could not reach PostgreSQL
// fail with ErrUnavailable, whichever query it was, so no caller has to
// tell a lost server from a bad row.
func markUnavailable(db *gorm.DB) error {
	mark := func(tx *gorm.DB) {
		if tx.Error != nil && unreachable(tx.Error) && !errors.Is(tx.Error, ErrUnavailable) {
			tx.Error = fmt.Errorf("%w: %w", ErrUnavailable, tx.Error)
		}
	}
	cb := db.Callback()
	for _, err := range []error{
		cb.Create().After("gorm:create").Register("atelier:unavailable", mark),
		cb.Query().After("gorm:query").Register("atelier:unavailable", mark),
		cb.Update().After("gorm:update").Register("atelier:unavailable", mark),
		cb.Delete().After("gorm:delete").Register("atelier:unavailable", mark),
		cb.Row().After("gorm:row").Register("atelier:unavailable", mark),
		cb.Raw().After("gorm:raw").Register("atelier:unavailable", mark),
	} {
		if err != nil {
			return fmt.Errorf("models: callbacks: %w", err)
		}
	}
	return nil
}

// unreachable reports an error of the connection rather than of the
// statement: no server at the address, a server shutting down or starting,
// a connection that broke.
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the request gave up, not the server
	}
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 is connection exceptions; 57P01-57P03 are shutdowns and
		// a server not yet accepting connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.SafeToRetry(err)
}

// Close closes the pool.
func (s *Store) Close() error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Tx runs fn in one transaction; an error or panic rolls it back.
func (s *Store) Tx(ctx context.Context, fn func(tx *Store) error) error {
	// A test's watch learns that ctx has a transaction open (txwatch).
	defer txwatch.Begin(ctx)()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(&Store{db: tx, dsn: s.dsn})
	})
	if err != nil && unreachable(err) && !errors.Is(err, ErrUnavailable) {
		// BEGIN and COMMIT pass no callback.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Exec runs a raw statement. Tests use it to write rows the way a script
// would, past every model check.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	return translate(s.db.WithContext(ctx).Exec(sql, args...).Error)
}

// translate maps PostgreSQL's refusals to the package's sentinel errors.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return &ConstraintError{Constraint: pgErr.ConstraintName, kind: ErrConflict, err: err}
		case "23514", "23502", "23503": // check, not null, foreign key
			return &ConstraintError{Constraint: pgErr.ConstraintName, kind: ErrInvalid, err: err}
		}
	}
	return err
}
