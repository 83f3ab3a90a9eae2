package meter

import (
	"context"
	"fmt"
	"time"

	"atelier/fault"
	"atelier/models"
)

// Usage is a project's meter for the current month, in seconds.
type Usage struct {
	Used     int64 // charged by settled commands and shells
	Reserved int64 // held by commands and shells still running
	Cap      int64
	Month    time.Time // the first instant of the month, UTC
}

// Warn reports whether the page should warn: from MarkLow on.
func (u Usage) Warn() bool { return u.Mark() >= MarkLow }

// Usage returns the project's meter for the current month.
func (m *Meter) Usage(ctx context.Context, projectID int64) (Usage, error) {
	month := MonthOf(m.now())
	u, err := m.db.SandboxUsageOf(ctx, projectID, month, m.defaultCap)
	if err != nil {
		return Usage{}, fmt.Errorf("meter: usage of project %d: %w", projectID, err)
	}
	return Usage{Used: u.UsedSeconds, Reserved: u.ReservedSeconds, Cap: u.CapSeconds, Month: month}, nil
}

// Marks of a project's use of its cap that pages point out.
const (
	MarkLow      = 80 // percent: running low
	MarkCritical = 95 // percent: nearly out
)

// Mark is the highest of MarkLow and MarkCritical the month's use has
// reached, else 0. A cap of zero is reached at once.
func (u Usage) Mark() int {
	switch {
	case u.Used*100 >= u.Cap*MarkCritical:
		return MarkCritical
	case u.Used*100 >= u.Cap*MarkLow:
		return MarkLow
	}
	return 0
}

// Percent is the month's use in whole percent of the cap.
func (u Usage) Percent() int64 {
	if u.Cap <= 0 {
		return 100
	}
	return u.Used * 100 / u.Cap
}

// HistoryMonths is how many months a project's history shows, this one
// included.
const HistoryMonths = 6

// ProjectMeter is one project's meter as site admins see it: this month,
// what is held now, and the months before.
type ProjectMeter struct {
	ProjectID   int64
	Project     string
	Usage       Usage
	CapOverride *int64     // nil: the project has the default cap
	AwakeUntil  *time.Time // the end of the idle tail paid for; nil if never awake
	// History is the used seconds of the last HistoryMonths months, oldest
	// first, ending with this one.
	History []MonthUse
}

// MonthUse is what a project used in one month.
type MonthUse struct {
	Month time.Time
	Used  int64
}

// Meters returns every active project's meter, by name.
func (m *Meter) Meters(ctx context.Context) ([]ProjectMeter, error) {
	month := MonthOf(m.now())
	rows, err := m.db.SandboxMeters(ctx, month, m.defaultCap)
	if err != nil {
		return nil, fmt.Errorf("meter: meters: %w", err)
	}
	first := month.AddDate(0, 1-HistoryMonths, 0)
	past, err := m.db.SandboxUsageSince(ctx, first)
	if err != nil {
		return nil, fmt.Errorf("meter: meters: %w", err)
	}
	used := map[int64]map[time.Time]int64{}
	for _, u := range past {
		if used[u.ProjectID] == nil {
			used[u.ProjectID] = map[time.Time]int64{}
		}
		used[u.ProjectID][u.Month] = u.UsedSeconds
	}
	ms := make([]ProjectMeter, len(rows))
	for i, r := range rows {
		ms[i] = ProjectMeter{
			ProjectID:   r.ProjectID,
			Project:     r.Project,
			Usage:       Usage{Used: r.UsedSeconds, Reserved: r.ReservedSeconds, Cap: r.CapSeconds, Month: month},
			CapOverride: r.CapOverride,
			AwakeUntil:  r.AwakeUntil,
			History:     make([]MonthUse, HistoryMonths),
		}
		for j := range ms[i].History {
			mo := first.AddDate(0, j, 0)
			ms[i].History[j] = MonthUse{Month: mo, Used: used[r.ProjectID][mo]}
		}
	}
	return ms, nil
}

// MonthlyUsage is every month's counter of every project, by project and
// month: the usage report's rows.
func (m *Meter) MonthlyUsage(ctx context.Context) ([]models.MonthUsage, error) {
	us, err := m.db.SandboxUsageSince(ctx, time.Date(1970, time.January, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		return nil, fmt.Errorf("meter: monthly usage: %w", err)
	}
	return us, nil
}

// ErrBadCap is a cap that is not a whole number of seconds from 0 on.
var ErrBadCap = fault.New(fault.BadInput, "bad_cap", "meter: a cap is a whole number of seconds, 0 or more", "A cap is a whole number of seconds, 0 or more; leave it empty for the default.")

// SetCap gives the project its own monthly cap; nil returns it to the
// default. A lower cap does not stop what already runs: it refuses the next
// reservation.
func (m *Meter) SetCap(ctx context.Context, projectID int64, seconds *int64) error {
	if seconds != nil && *seconds < 0 {
		return ErrBadCap
	}
	if err := m.db.SetSandboxCap(ctx, projectID, seconds); err != nil {
		return fmt.Errorf("meter: cap of project %d: %w", projectID, err)
	}
	m.changed(projectID)
	return nil
}

// DefaultCap is the cap of projects without their own.
func (m *Meter) DefaultCap() int64 { return m.defaultCap }
