// Package instances keeps this server process's place among the
// instances that share one database: a row that lives while its heartbeat
// does, the one live instance of a place (the host-local sandbox area and
// uids it owns), and the release, once, of what an instance that is gone
// held: its sandbox reservations and its sessions' runtimes.
//
// An instance is gone when it stopped, when its heartbeat is GoneAfter
// late, or when a new instance took its place at start. A place is held
// with an exclusive lock on a file of it for the process's life, so an
// instance that gets the lock knows every earlier one of the place has
// ended, and may kill what they left running there at once.
package instances

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"atelier/meter"
	"atelier/models"
)

// The heartbeat's pace and how late it may come.
const (
	DefaultEvery     = 3 * time.Second
	DefaultGoneAfter = 12 * time.Second
)

// ErrPlaceTaken: another live process holds the place.
var ErrPlaceTaken = errors.New("instances: another server process uses this sandbox area; give each instance its own ATELIER_SANDBOX_AREA")

// Options are what an Instance works with.
type Options struct {
	DB    *models.Store
	Meter *meter.Meter
	ID    string // this process, new at every start
	// Place names what this process owns on its host; PlaceLock is a file
	// of it whose lock the process holds while it lives.
	Place, PlaceLock string
	// Address is where other instances hand this one requests about the
	// sessions it holds (ATELIER_INTERNAL_URL); "": nowhere.
	Address string
	// Shared is a folder on the volume every instance of the database
	// must share (the data folder): each live instance keeps a locked
	// probe there, and a start checks that it sees the others' probes,
	// locked. "": no check.
	Shared           string
	Every, GoneAfter time.Duration // 0: the defaults
	// Revived runs when this instance finds it was declared gone and
	// records itself live again: what it ran for sessions is no longer
	// its own. nil: nothing.
	Revived func(ctx context.Context)
	Now     func() time.Time
	Log     *slog.Logger
}

// Instance is this server process among those sharing the database.
type Instance struct {
	o     Options
	lock  *os.File
	probe *os.File // in Shared, locked while the process lives
}

// New returns this process's instance; Start records it.
func New(o Options) *Instance {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.GoneAfter <= 0 {
		o.GoneAfter = DefaultGoneAfter
	}
	return &Instance{o: o}
}

// Start takes the place (ErrPlaceTaken while another process holds it),
// checks that the shared folder is the other live instances' and carries
// their locks (ErrNotShared, ErrLocksNotShared), records this instance as
// its place's live one, settles what gone instances had
// reserved, and answers the instances of the place that were still
// recorded as live: they have ended, and what they left on this host is
// the caller's to clean.
func (in *Instance) Start(ctx context.Context) (gone []string, err error) {
	if err := os.MkdirAll(filepath.Dir(in.o.PlaceLock), 0o700); err != nil {
		return nil, fmt.Errorf("instances: place lock: %w", err)
	}
	f, err := os.OpenFile(in.o.PlaceLock, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instances: place lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrPlaceTaken, in.o.PlaceLock)
		}
		return nil, fmt.Errorf("instances: place lock: %w", err)
	}
	if in.o.Shared != "" {
		if in.probe, err = in.holdProbe(); err == nil {
			err = in.checkShared(ctx)
		}
		if err != nil {
			in.dropProbe()
			f.Close()
			return nil, err
		}
	}
	if gone, err = in.o.DB.StartInstance(ctx, in.o.ID, in.o.Place, in.o.Address, in.o.Now()); err != nil {
		in.dropProbe()
		f.Close()
		return nil, err
	}
	in.lock = f
	if len(gone) > 0 {
		in.o.Log.Info("earlier instances of this place have ended", "instances", gone)
	}
	in.settle(ctx)
	return gone, nil
}

// Beat renews this instance's heartbeat, declares instances whose
// heartbeat is late gone (freeing the sessions they held), and settles
// the reservations of every gone instance. An instance that finds itself
// declared gone (its own heartbeat came too late: a stalled host, say)
// records itself live again, and says so: its reservations were settled
// and its sessions freed meanwhile, and another instance may have taken
// some.
func (in *Instance) Beat(ctx context.Context) {
	now := in.o.Now()
	err := in.o.DB.BeatInstance(ctx, in.o.ID, now)
	if errors.Is(err, models.ErrInstanceGone) {
		in.o.Log.Error("this instance was declared gone by another (its heartbeat came too late); it records itself live again, and ends what it ran for sessions, which may have moved")
		if err = in.o.DB.ReviveInstance(ctx, in.o.ID, now); err == nil && in.o.Revived != nil {
			in.o.Revived(ctx)
		}
	}
	if err != nil {
		in.o.Log.Warn("instance heartbeat not renewed", "err", err)
		return
	}
	gone, err := in.o.DB.DeclareLateGone(ctx, now.Add(-in.o.GoneAfter), now)
	if err != nil {
		in.o.Log.Warn("late instances not declared gone", "err", err)
		return
	}
	if len(gone) > 0 {
		in.o.Log.Warn("instances declared gone: their heartbeat is late", "instances", gone, "after", in.o.GoneAfter)
	}
	in.settle(ctx)
}

// settle settles the reservations of gone instances.
func (in *Instance) settle(ctx context.Context) {
	if n, err := in.o.Meter.SettleAbandoned(ctx); err != nil {
		in.o.Log.Warn("reservations of gone instances not settled", "err", err)
	} else if n > 0 {
		in.o.Log.Info("sandbox reservations of gone instances settled", "count", n)
	}
}

// Run beats every Every until ctx ends.
func (in *Instance) Run(ctx context.Context) {
	t := time.NewTicker(in.o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			in.Beat(ctx)
		}
	}
}

// Stop records that this instance stopped, which frees the sessions it
// held, and lets the place go; an instance that never started has nothing
// to stop.
func (in *Instance) Stop(ctx context.Context) error {
	if in.lock == nil {
		return nil // never started, or stopped already
	}
	err := in.o.DB.StopInstance(ctx, in.o.ID, in.o.Now())
	in.dropProbe()
	in.lock.Close()
	in.lock = nil
	return err
}
