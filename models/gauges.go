package models

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// What monitoring reads at each scrape: counts the database already holds,
// so no process keeps a second count that could drift from them.

// SandboxCounter is one project's sandbox-seconds in one month.
type SandboxCounter struct {
	ProjectID       int64
	Project         string
	UsedSeconds     int64
	ReservedSeconds int64
	CapSeconds      int64 // the project's override, else the default given
}

// SandboxCountersOf returns the counters of month, by project id: only
// projects that reserved sandbox time that month have one, so the list grows
// with the projects that ran something, not with every project ever made.
func (s *Store) SandboxCountersOf(ctx context.Context, month time.Time, defaultCap int64) ([]SandboxCounter, error) {
	key, err := monthKey(month)
	if err != nil {
		return nil, err
	}
	var cs []SandboxCounter
	err = s.db.WithContext(ctx).Raw(`SELECT u.project_id, p.name AS project, u.used_seconds, u.reserved_seconds,
			COALESCE(p.sandbox_monthly_seconds, ?) AS cap_seconds
		FROM usage_counters AS u JOIN projects AS p ON p.id = u.project_id
		WHERE u.month = CAST(? AS date)
		ORDER BY u.project_id`, defaultCap, key).Scan(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("models: sandbox counters of %s: %w", key, err)
	}
	return cs, nil
}

// OpenSessionCount is how many edit sessions are open, on every instance.
func (s *Store) OpenSessionCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&CodeSession{}).Where("state = ?", SessionOpen).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("models: open sessions: %w", err)
	}
	return n, nil
}

// PoolStats is the connection pool's own account of its use.
func (s *Store) PoolStats() sql.DBStats {
	sqlDB, err := s.db.DB()
	if err != nil {
		return sql.DBStats{} // gorm over a transaction; Open never gives one out
	}
	return sqlDB.Stats()
}
