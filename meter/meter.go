// Package meter holds each project to its monthly budget of sandbox-seconds
// (ADR 0029): a command reserves time before the Sandbox starts, is refused at
// the cap, and afterwards settles to the awake time it really added.
//
// The month is the calendar month in UTC of the reservation. A project may
// use SANDBOX_MONTHLY_SECONDS a month, or its own projects.sandbox_monthly_seconds
// when that is set. The counting happens in PostgreSQL (models.Store), so
// every server process and every request share one meter.
package meter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"atelier/fault"
	"atelier/models"
)

const (
	// DefaultCap is SANDBOX_MONTHLY_SECONDS when it is not set: 20 hours.
	DefaultCap int64 = 72_000
	// Chunk is what a command reserves before the Sandbox starts, and what
	// a shell adds each time it renews. It covers a command's 120 s timeout
	// and its idle tail with room to spare.
	Chunk int64 = 480
	// Tail is how long the Sandbox stays awake after its last command.
	Tail = 120 * time.Second
	// renewLead is how much of a shell's reservation must still be left,
	// beyond the tail its end will cost, for Renew to leave it alone.
	// A shell that calls Renew once a minute never runs past its holding.
	renewLead = 2 * time.Minute
	// settleTimeout bounds a settlement that no longer has its caller's
	// deadline.
	settleTimeout = 30 * time.Second
)

var (
	// ErrCap refuses a reservation at the project's monthly cap; the server
	// answers 429 with reason sandbox_cap.
	ErrCap = fault.New(fault.Limit, "sandbox_cap", "meter: monthly sandbox cap reached", "The project has used its sandbox time for this month; editing still works, commands are off until next month.")
	// ErrSettled is a reservation that was already settled: by its holder,
	// or by SettleAbandoned in a later server process.
	ErrSettled = errors.New("meter: reservation already settled")
)

// Meter reserves, renews and settles sandbox-seconds.
type Meter struct {
	db         *models.Store
	defaultCap int64
	now        func() time.Time
	notify     func(projectID int64)
}

// OnChange has fn told of every change to a project's meter (a
// reservation, a renewal, a settlement, a new cap), after it is committed.
// fn must not block; call OnChange before the meter is used.
func (m *Meter) OnChange(fn func(projectID int64)) { m.notify = fn }

func (m *Meter) changed(projectID int64) {
	if m.notify != nil {
		m.notify(projectID)
	}
}

// New returns a meter over db. defaultCap is SANDBOX_MONTHLY_SECONDS; now is
// the clock (time.Now when nil).
func New(db *models.Store, defaultCap int64, now func() time.Time) *Meter {
	if now == nil {
		now = time.Now
	}
	return &Meter{db: db, defaultCap: defaultCap, now: now}
}

// Reservation is sandbox time held for one command or one shell. It is not
// safe for concurrent use: one holder renews and settles it.
type Reservation struct {
	ID        int64
	ProjectID int64
	Month     time.Time // the month it is charged to, see MonthOf
	Seconds   int64     // held so far
	StartedAt time.Time
	Instance  string
}

// MonthOf is the first instant of t's calendar month in UTC.
func MonthOf(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// Reserve holds one Chunk for a command of the project, to be settled when
// it ends. instance names this server process, a live instance (see
// SettleAbandoned). ErrCap
// when the month's used and reserved seconds leave less than a Chunk.
func (m *Meter) Reserve(ctx context.Context, projectID int64, instance string) (*Reservation, error) {
	now := m.now()
	mr := models.SandboxReservation{
		ProjectID: projectID,
		Month:     MonthOf(now),
		Seconds:   Chunk,
		StartedAt: now,
		Instance:  instance,
	}
	if err := m.db.ReserveSandbox(ctx, &mr, m.defaultCap); err != nil {
		if errors.Is(err, models.ErrOverCap) {
			return nil, fmt.Errorf("meter: reserve for project %d: %w", projectID, ErrCap)
		}
		return nil, fmt.Errorf("meter: reserve for project %d: %w", projectID, err)
	}
	m.changed(projectID)
	return fromModel(mr), nil
}

// Renew keeps a live shell's reservation ahead of its awake time: when what
// is held would not cover the time so far, the tail and renewLead, it
// reserves as many more Chunks as that takes, and otherwise does nothing.
// Call it at least once a minute while the shell is open. ErrCap means the
// month has no room left: the shell must close and settle.
func (m *Meter) Renew(ctx context.Context, r *Reservation) error {
	covered := r.StartedAt.Add(time.Duration(r.Seconds) * time.Second)
	short := m.now().Add(Tail + renewLead).Sub(covered)
	if short <= 0 {
		return nil
	}
	chunks := (ceilSeconds(short) + Chunk - 1) / Chunk
	mr, err := m.db.RenewSandbox(ctx, r.ID, chunks*Chunk, m.defaultCap)
	switch {
	case errors.Is(err, models.ErrOverCap):
		return fmt.Errorf("meter: renew reservation %d: %w", r.ID, ErrCap)
	case errors.Is(err, models.ErrNotFound):
		return fmt.Errorf("meter: renew reservation %d: %w", r.ID, ErrSettled)
	case err != nil:
		return fmt.Errorf("meter: renew reservation %d: %w", r.ID, err)
	}
	r.Seconds = mr.Seconds
	m.changed(r.ProjectID)
	return nil
}

// Settle closes r for a command (or a shell) that ran from start to end, and
// returns the seconds charged: the awake time it added, which is its run
// time plus the Tail, less what an earlier command's tail already paid, and
// never more than r held. The reservation is released and the charge added to
// r's month in one transaction.
//
// Settling must happen even when the request that ran the command has gone,
// or the reservation would block the cap until the next restart, so ctx's
// cancellation is ignored in favour of a deadline of its own.
func (m *Meter) Settle(ctx context.Context, r *Reservation, start, end time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if end.Before(start) {
		end = start
	}
	charged, err := m.db.SettleSandbox(ctx, r.ID, func(mr models.SandboxReservation, awakeUntil time.Time) (int64, time.Time) {
		return awake(start, end.Add(Tail), awakeUntil, mr.Seconds)
	})
	if errors.Is(err, models.ErrNotFound) {
		return 0, fmt.Errorf("meter: settle reservation %d: %w", r.ID, ErrSettled)
	}
	if err != nil {
		return 0, fmt.Errorf("meter: settle reservation %d: %w", r.ID, err)
	}
	m.changed(r.ProjectID)
	return charged, nil
}

// Unreserve closes r at nothing, for a command or a shell whose sandbox
// never came to run it (its checkout, or its pod, could not be made: the
// cluster out of reach, the host's disk full), and leaves the project's
// paid tail where it was: no code of the project ran on it. A second
// settlement of r is ErrSettled, as after Settle.
func (m *Meter) Unreserve(ctx context.Context, r *Reservation) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	_, err := m.db.SettleSandbox(ctx, r.ID, func(_ models.SandboxReservation, awakeUntil time.Time) (int64, time.Time) {
		return 0, awakeUntil
	})
	if errors.Is(err, models.ErrNotFound) {
		return fmt.Errorf("meter: unreserve reservation %d: %w", r.ID, ErrSettled)
	}
	if err != nil {
		return fmt.Errorf("meter: unreserve reservation %d: %w", r.ID, err)
	}
	m.changed(r.ProjectID)
	return nil
}

// SettleAbandoned settles every open reservation whose instance does not
// live any more (stopped, declared gone, or older than instances), and
// returns how many it settled; a live instance's reservations, on this
// host or another, are its own to settle. Each is settled once, whoever
// calls it and however often.
//
// Nobody knows when an abandoned command ended, so it is charged as if it had
// been awake for the whole of its reservation: from StartedAt to StartedAt +
// Seconds, less what the project's idle tail already paid, the same overlap
// rule as Settle. That is the most the holder was entitled to and never more
// than it held; the Sandbox may well have stayed awake that long after the
// crash (the command runs to its timeout, then the tail). Charging less would
// let a crashing process run commands off the meter. The project's tail
// moves to the reservation's end, so a command in that span is not charged
// twice.
func (m *Meter) SettleAbandoned(ctx context.Context) (int, error) {
	rs, err := m.db.SandboxReservationsOfGone(ctx)
	if err != nil {
		return 0, fmt.Errorf("meter: abandoned reservations: %w", err)
	}
	n := 0
	for _, r := range rs {
		_, err := m.db.SettleSandbox(ctx, r.ID, func(mr models.SandboxReservation, awakeUntil time.Time) (int64, time.Time) {
			return awake(mr.StartedAt, mr.StartedAt.Add(time.Duration(mr.Seconds)*time.Second), awakeUntil, mr.Seconds)
		})
		if errors.Is(err, models.ErrNotFound) {
			continue // its holder settled it after all
		}
		if err != nil {
			return n, fmt.Errorf("meter: settle abandoned reservation %d of %q: %w", r.ID, r.Instance, err)
		}
		m.changed(r.ProjectID)
		n++
	}
	return n, nil
}

// awake is the rule of ADR 0029 for one span of awake time [from, until]
// (until is the end of the command plus its tail): it charges the part of the
// span after awakeUntil, the end of the tail already paid for, rounded up to
// whole seconds and at most held, and returns the new end of the paid tail.
func awake(from, until, awakeUntil time.Time, held int64) (int64, time.Time) {
	if awakeUntil.After(from) {
		from = awakeUntil
	}
	charged := max(ceilSeconds(until.Sub(from)), 0)
	charged = min(charged, held)
	if awakeUntil.After(until) {
		until = awakeUntil
	}
	return charged, until
}

// ceilSeconds counts a started second as a whole one.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

func fromModel(mr models.SandboxReservation) *Reservation {
	return &Reservation{
		ID:        mr.ID,
		ProjectID: mr.ProjectID,
		Month:     mr.Month,
		Seconds:   mr.Seconds,
		StartedAt: mr.StartedAt,
		Instance:  mr.Instance,
	}
}
