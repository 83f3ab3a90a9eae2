package meter

import (
	"context"
	"fmt"
	"time"
)

// Usage is a project's meter for the current month, in seconds.
type Usage struct {
	Used     int64 // charged by settled commands and shells
	Reserved int64 // held by commands and shells still running
	Cap      int64
	Month    time.Time // the first instant of the month, UTC
}

// Warn reports whether the page should warn: from 80 % of the cap on.
func (u Usage) Warn() bool {
	return u.Used*5 >= u.Cap*4
}

// Usage returns the project's meter for the current month.
func (m *Meter) Usage(ctx context.Context, projectID int64) (Usage, error) {
	month := MonthOf(m.now())
	u, err := m.db.SandboxUsageOf(ctx, projectID, month, m.defaultCap)
	if err != nil {
		return Usage{}, fmt.Errorf("meter: usage of project %d: %w", projectID, err)
	}
	return Usage{Used: u.UsedSeconds, Reserved: u.ReservedSeconds, Cap: u.CapSeconds, Month: month}, nil
}
