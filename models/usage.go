package models

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrOverCap is a reservation that would take a month's used plus reserved
// sandbox-seconds past the project's cap.
var ErrOverCap = errors.New("models: sandbox cap reached")

// SandboxReservation is sandbox-seconds held on one month's counter of one
// project until its holder settles it (ADR 0029). Settling deletes the row.
type SandboxReservation struct {
	ID        int64
	ProjectID int64
	Month     time.Time // the first day of the month, UTC
	Seconds   int64     // held so far; Renew adds to it
	StartedAt time.Time
	Instance  string // the server process that holds it
}

// TableName maps SandboxReservation to sandbox_reservations.
func (SandboxReservation) TableName() string { return "sandbox_reservations" }

// SandboxUsage is one month of one project's meter.
type SandboxUsage struct {
	UsedSeconds     int64
	ReservedSeconds int64
	CapSeconds      int64 // the project's override, else the default given
}

// monthKey renders month as the date PostgreSQL stores. Dates travel as text
// and are cast in SQL: a time.Time would pass through the session's time
// zone on its way to a date.
func monthKey(month time.Time) (string, error) {
	m := month.UTC()
	if m.Day() != 1 {
		return "", fmt.Errorf("%w: month %s is not the first day of a month (usage_counters_month_first_day)", ErrInvalid, m.Format(time.DateOnly))
	}
	return m.Format(time.DateOnly), nil
}

// ReserveSandbox holds r.Seconds on the counter of r.ProjectID for r.Month
// and inserts r, setting r.ID. ErrOverCap when the month's used plus reserved
// seconds would pass the project's cap (its sandbox_monthly_seconds, else
// defaultCap); ErrNotFound when the project does not exist.
func (s *Store) ReserveSandbox(ctx context.Context, r *SandboxReservation, defaultCap int64) error {
	month, err := monthKey(r.Month)
	if err != nil {
		return err
	}
	switch {
	case r.Seconds <= 0:
		return fmt.Errorf("%w: a reservation holds a positive number of seconds (sandbox_reservations_seconds_positive)", ErrInvalid)
	case r.Instance == "" || len([]rune(r.Instance)) > 100:
		return fmt.Errorf("%w: instance %q has 1 to 100 characters (sandbox_reservations_instance_length)", ErrInvalid, r.Instance)
	}
	// One statement, so one round trip on every command's way: the
	// counter is made or updated under its row lock with the cap tested on
	// the row as committed (as addReserved does), and the reservation is
	// inserted only when the counter took the seconds.
	res := s.db.WithContext(ctx).Raw(`WITH counter AS (
			INSERT INTO usage_counters AS u (project_id, month, reserved_seconds)
			SELECT p.id, CAST(? AS date), ? FROM projects AS p
			WHERE p.id = ? AND ? <= COALESCE(p.sandbox_monthly_seconds, ?)
			ON CONFLICT (project_id, month) DO UPDATE SET reserved_seconds = u.reserved_seconds + EXCLUDED.reserved_seconds
			WHERE u.used_seconds + u.reserved_seconds + EXCLUDED.reserved_seconds <=
				(SELECT COALESCE(p.sandbox_monthly_seconds, ?) FROM projects AS p WHERE p.id = u.project_id)
			RETURNING u.project_id
		)
		INSERT INTO sandbox_reservations (project_id, month, seconds, started_at, instance)
		SELECT project_id, CAST(? AS date), ?, ?, ? FROM counter
		RETURNING id`,
		month, r.Seconds, r.ProjectID, r.Seconds, defaultCap, defaultCap,
		month, r.Seconds, r.StartedAt, r.Instance).Scan(&r.ID)
	err = res.Error
	if err == nil && res.RowsAffected == 0 {
		// Nothing taken: past the cap, or no such project.
		err = ErrOverCap
		var projects int64
		if cerr := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM projects WHERE id = ?`, r.ProjectID).Scan(&projects).Error; cerr != nil {
			err = cerr
		} else if projects == 0 {
			err = ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("models: reserve sandbox for project %d: %w", r.ProjectID, translateUsage(err))
	}
	return nil
}

// addReserved is how a renewal enforces the cap (a first reservation does
// the same in ReserveSandbox's upsert). The test and the increment are a
// single UPDATE: PostgreSQL holds the counter's row lock from it until
// the transaction ends, and a concurrent UPDATE that waited for that lock
// evaluates its WHERE again on the row as committed, so no interleaving of
// reservations can pass the cap.
func (tx *Store) addReserved(projectID int64, month string, seconds, defaultCap int64) error {
	res := tx.db.Exec(`UPDATE usage_counters AS u
		SET reserved_seconds = u.reserved_seconds + ?
		FROM projects AS p
		WHERE p.id = u.project_id AND u.project_id = ? AND u.month = CAST(? AS date)
		  AND u.used_seconds + u.reserved_seconds + ? <= COALESCE(p.sandbox_monthly_seconds, ?)`,
		seconds, projectID, month, seconds, defaultCap)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return ErrOverCap
	}
	return nil
}

// RenewSandbox adds seconds to an open reservation, on the counter of the
// month it was made in, and returns the reservation as it now stands.
// ErrOverCap as for ReserveSandbox (the reservation is left as it was);
// ErrNotFound when it was settled.
func (s *Store) RenewSandbox(ctx context.Context, id, seconds, defaultCap int64) (*SandboxReservation, error) {
	if seconds <= 0 {
		return nil, fmt.Errorf("%w: renew by %d seconds", ErrInvalid, seconds)
	}
	var r SandboxReservation
	err := s.Tx(ctx, func(tx *Store) error {
		// The lock keeps a settlement from deleting the row between the
		// counter's update and the row's.
		res := tx.db.Raw(`SELECT * FROM sandbox_reservations WHERE id = ? FOR UPDATE`, id).Scan(&r)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrNotFound
		}
		month, err := monthKey(r.Month)
		if err != nil {
			return err
		}
		if err := tx.addReserved(r.ProjectID, month, seconds, defaultCap); err != nil {
			return err
		}
		r.Seconds += seconds
		return tx.db.Exec(`UPDATE sandbox_reservations SET seconds = ? WHERE id = ?`, r.Seconds, id).Error
	})
	if err != nil {
		return nil, fmt.Errorf("models: renew sandbox reservation %d: %w", id, translateUsage(err))
	}
	return &r, nil
}

// SandboxCharge decides what a settled reservation costs: given the
// reservation and the end of the project's idle tail so far (zero when the
// Sandbox was never settled awake), it returns the seconds to charge and the
// new end of the tail.
type SandboxCharge func(r SandboxReservation, awakeUntil time.Time) (charged int64, newAwakeUntil time.Time)

// SettleSandbox closes reservation id in one transaction: it deletes the row,
// asks charge what to bill, moves the project's awake_until, and on the
// counter of the reservation's month releases the reserved seconds and adds
// the charge, which must be between 0 and the reserved seconds. ErrNotFound
// when the reservation was already settled.
func (s *Store) SettleSandbox(ctx context.Context, id int64, charge SandboxCharge) (int64, error) {
	var charged int64
	err := s.Tx(ctx, func(tx *Store) error {
		// Deleting first claims the reservation: of two settlements of one
		// row, the second finds nothing and charges nothing.
		var r SandboxReservation
		res := tx.db.Raw(`DELETE FROM sandbox_reservations WHERE id = ? RETURNING *`, id).Scan(&r)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrNotFound
		}
		// An upsert that always writes, so the row is locked whether it was
		// there or not: two first settlements of a project cannot both read
		// "never awake".
		var awake struct{ AwakeUntil *time.Time }
		err := tx.db.Raw(`INSERT INTO sandbox_awake (project_id) VALUES (?)
			ON CONFLICT (project_id) DO UPDATE SET awake_until = sandbox_awake.awake_until
			RETURNING awake_until`, r.ProjectID).Scan(&awake).Error
		if err != nil {
			return err
		}
		var until time.Time
		if awake.AwakeUntil != nil {
			until = *awake.AwakeUntil
		}
		c, next := charge(r, until)
		if c < 0 || c > r.Seconds {
			return fmt.Errorf("%w: a charge of %d seconds on a reservation of %d", ErrInvalid, c, r.Seconds)
		}
		if next.Before(until) {
			next = until // the tail never moves back
		}
		if !next.IsZero() {
			if err := tx.db.Exec(`UPDATE sandbox_awake SET awake_until = ? WHERE project_id = ?`, next, r.ProjectID).Error; err != nil {
				return err
			}
		}
		month, err := monthKey(r.Month)
		if err != nil {
			return err
		}
		res = tx.db.Exec(`UPDATE usage_counters
			SET reserved_seconds = reserved_seconds - ?, used_seconds = used_seconds + ?
			WHERE project_id = ? AND month = CAST(? AS date)`, r.Seconds, c, r.ProjectID, month)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("no counter for %s", month) // the foreign key makes this impossible
		}
		charged = c
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("models: settle sandbox reservation %d: %w", id, translateUsage(err))
	}
	return charged, nil
}

// SandboxReservationsNotOf lists the open reservations held by every server
// process but instance, oldest first.
func (s *Store) SandboxReservationsNotOf(ctx context.Context, instance string) ([]SandboxReservation, error) {
	var rs []SandboxReservation
	err := s.db.WithContext(ctx).Where("instance <> ?", instance).Order("id").Find(&rs).Error
	if err != nil {
		return nil, fmt.Errorf("models: sandbox reservations not of %q: %w", instance, err)
	}
	return rs, nil
}

// SandboxUsageOf returns the project's meter for month; a month without a
// reservation reads as zero. ErrNotFound when the project does not exist.
func (s *Store) SandboxUsageOf(ctx context.Context, projectID int64, month time.Time, defaultCap int64) (*SandboxUsage, error) {
	key, err := monthKey(month)
	if err != nil {
		return nil, err
	}
	var u SandboxUsage
	res := s.db.WithContext(ctx).Raw(`SELECT COALESCE(u.used_seconds, 0) AS used_seconds,
			COALESCE(u.reserved_seconds, 0) AS reserved_seconds,
			COALESCE(p.sandbox_monthly_seconds, ?) AS cap_seconds
		FROM projects AS p
		LEFT JOIN usage_counters AS u ON u.project_id = p.id AND u.month = CAST(? AS date)
		WHERE p.id = ?`, defaultCap, key, projectID).Scan(&u)
	if res.Error != nil {
		return nil, fmt.Errorf("models: sandbox usage of project %d: %w", projectID, res.Error)
	}
	if res.RowsAffected == 0 {
		return nil, fmt.Errorf("models: sandbox usage of project %d: %w", projectID, ErrNotFound)
	}
	return &u, nil
}

// SetSandboxCap sets the project's monthly sandbox-seconds; nil returns it
// to the default.
func (s *Store) SetSandboxCap(ctx context.Context, projectID int64, seconds *int64) error {
	if seconds != nil && *seconds < 0 {
		return fmt.Errorf("%w: a sandbox cap of %d seconds (projects_sandbox_monthly_seconds_nonnegative)", ErrInvalid, *seconds)
	}
	res := s.db.WithContext(ctx).Exec(`UPDATE projects SET sandbox_monthly_seconds = ? WHERE id = ?`, seconds, projectID)
	if res.Error != nil {
		return fmt.Errorf("models: sandbox cap of project %d: %w", projectID, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: sandbox cap of project %d: %w", projectID, ErrNotFound)
	}
	return nil
}

// translateUsage is translate, with a reservation for a missing project
// reported as the missing project it is.
func translateUsage(err error) error {
	err = translate(err)
	var ce *ConstraintError
	if errors.As(err, &ce) && ce.Constraint == "usage_counters_project_id_fkey" {
		return ErrNotFound
	}
	return err
}

// ProjectMeter is one project's meter for one month, as the admin
// dashboard lists it.
type ProjectMeter struct {
	ProjectID       int64
	Project         string
	Month           time.Time
	UsedSeconds     int64
	ReservedSeconds int64
	CapSeconds      int64  // the project's override, else the default given
	CapOverride     *int64 // the project's own cap, nil for the default
	AwakeUntil      *time.Time
}

// SandboxMeters returns every active project's meter for month, by name;
// a project without a counter that month reads as zero.
func (s *Store) SandboxMeters(ctx context.Context, month time.Time, defaultCap int64) ([]ProjectMeter, error) {
	key, err := monthKey(month)
	if err != nil {
		return nil, err
	}
	var ms []ProjectMeter
	err = s.db.WithContext(ctx).Raw(`SELECT p.id AS project_id, p.name AS project, CAST(? AS date) AS month,
			COALESCE(u.used_seconds, 0) AS used_seconds, COALESCE(u.reserved_seconds, 0) AS reserved_seconds,
			COALESCE(p.sandbox_monthly_seconds, ?) AS cap_seconds, p.sandbox_monthly_seconds AS cap_override,
			a.awake_until
		FROM projects AS p
		LEFT JOIN usage_counters AS u ON u.project_id = p.id AND u.month = CAST(? AS date)
		LEFT JOIN sandbox_awake AS a ON a.project_id = p.id
		WHERE p.status = 'active'
		ORDER BY p.name, p.id`, key, defaultCap, key).Scan(&ms).Error
	if err != nil {
		return nil, fmt.Errorf("models: sandbox meters of %s: %w", key, err)
	}
	return ms, nil
}

// MonthUsage is what one project used in one month.
type MonthUsage struct {
	ProjectID       int64
	Project         string
	Month           time.Time
	UsedSeconds     int64
	ReservedSeconds int64
}

// SandboxUsageSince returns every counter from the month since on, by
// project and month. The counters are the meter itself: these rows sum to
// what the meter charged.
func (s *Store) SandboxUsageSince(ctx context.Context, since time.Time) ([]MonthUsage, error) {
	key, err := monthKey(since)
	if err != nil {
		return nil, err
	}
	var us []MonthUsage
	err = s.db.WithContext(ctx).Raw(`SELECT u.project_id, p.name AS project, u.month, u.used_seconds, u.reserved_seconds
		FROM usage_counters AS u JOIN projects AS p ON p.id = u.project_id
		WHERE u.month >= CAST(? AS date)
		ORDER BY p.name, u.project_id, u.month`, key).Scan(&us).Error
	if err != nil {
		return nil, fmt.Errorf("models: sandbox usage since %s: %w", key, err)
	}
	for i := range us {
		us[i].Month = us[i].Month.UTC()
	}
	return us, nil
}
