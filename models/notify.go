package models

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// Listener opens a connection of its own to the database, outside the
// pool: a LISTEN lasts as long as its session, so it cannot borrow a
// pooled connection that the next query would share or the pool close
// when idle. The caller closes it.
// It is made by the pool's own driver, so it is configured as the pool's
// connections are.
func (s *Store) Listener(ctx context.Context) (*pgx.Conn, error) {
	connector, err := stdlib.GetDefaultDriver().(driver.DriverContext).OpenConnector(s.dsn)
	if err != nil {
		return nil, fmt.Errorf("models: listener: %w", err)
	}
	conn, err := connector.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("models: listener: %w", err)
	}
	return conn.(*stdlib.Conn).Conn(), nil
}

// Notify sends payload to the listeners of channel. The statement commits
// alone, so they hear it at once, and only what committed before it.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if err := s.db.WithContext(ctx).Exec(`SELECT pg_notify(?, ?)`, channel, payload).Error; err != nil {
		return fmt.Errorf("models: notify %s: %w", channel, translate(err))
	}
	return nil
}

// EventByID returns one event of the log, or ErrNotFound.
func (s *Store) EventByID(ctx context.Context, id int64) (*Event, error) {
	var e Event
	err := s.db.WithContext(ctx).First(&e, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("models: event %d: %w", id, translate(err))
	}
	return &e, nil
}
