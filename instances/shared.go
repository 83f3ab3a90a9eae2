package instances

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotShared: a live instance on the database keeps its data elsewhere;
// canonical repositories would part ways.
var ErrNotShared = errors.New("instances: another live instance on this database does not share ATELIER_DATA with this one; every instance must see the same data folder")

// ErrLocksNotShared: the data folder is shared, but a lock taken on it by
// one instance is not seen by another (a network file system without
// lock support), so nothing that locks files on it would hold.
var ErrLocksNotShared = errors.New("instances: the shared data folder does not carry file locks between instances; mount it with lock support")

// probeSuffix names the file each live instance keeps locked in the
// shared folder.
const probeSuffix = ".probe"

// holdProbe creates this instance's probe in the shared folder and holds
// an exclusive lock on it for the process's life. It is made before the
// instance's row, so whoever sees the row finds the probe locked, and it
// is locked under another name before it takes its own, so no sweep ever
// finds it unlocked.
func (in *Instance) holdProbe() (*os.File, error) {
	if err := os.MkdirAll(in.o.Shared, 0o700); err != nil {
		return nil, fmt.Errorf("instances: shared folder: %w", err)
	}
	making := in.probePath(in.o.ID) + ".new"
	f, err := os.OpenFile(making, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instances: probe: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		err = os.Rename(making, in.probePath(in.o.ID))
	}
	if err != nil {
		f.Close()
		os.Remove(making)
		return nil, fmt.Errorf("instances: probe: %w", err)
	}
	return f, nil
}

// dropProbe removes this instance's probe while it still holds its lock.
func (in *Instance) dropProbe() {
	if in.probe != nil {
		os.Remove(in.probePath(in.o.ID))
		in.probe.Close()
		in.probe = nil
	}
}

func (in *Instance) probePath(id string) string {
	return filepath.Join(in.o.Shared, id+probeSuffix)
}

// checkShared asks of every live instance of another place that its
// probe is in the shared folder (ErrNotShared otherwise) and locked. A
// probe found unlocked is an instance that died and is not yet declared
// gone, or a folder that does not carry locks: the instance's heartbeat
// tells which. It waits at most GoneAfter for a beat; one that comes
// means the lock was not seen (ErrLocksNotShared).
func (in *Instance) checkShared(ctx context.Context) error {
	beats, err := in.o.DB.InstanceBeats(ctx, in.o.Place)
	if err != nil {
		return err
	}
	in.sweepProbes(beats)
	unlocked := map[string]time.Time{}
	for id, beat := range beats {
		held, err := in.probeHeld(id)
		if err != nil {
			return err
		}
		if !held {
			unlocked[id] = beat
		}
	}
	if len(unlocked) == 0 {
		return nil
	}
	in.o.Log.Info("a live instance's probe is not locked; waiting to see whether it beats", "instances", len(unlocked))
	tick := time.NewTicker(min(in.o.Every, time.Second))
	defer tick.Stop()
	deadline := time.NewTimer(in.o.GoneAfter)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil // none beat: they died, and the next beat declares them gone
		case <-tick.C:
		}
		now, err := in.o.DB.InstanceBeats(ctx, in.o.Place)
		if err != nil {
			return err
		}
		for id, beat := range unlocked {
			if later, live := now[id]; live && later.After(beat) {
				return fmt.Errorf("%w (instance %s beats, yet its lock on %s was free)", ErrLocksNotShared, id, in.probePath(id))
			}
		}
	}
}

// probeHeld reports whether another process holds the lock of id's probe;
// ErrNotShared when there is no probe to lock.
func (in *Instance) probeHeld(id string) (bool, error) {
	f, err := os.OpenFile(in.probePath(id), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("%w (instance %s has no probe in %s)", ErrNotShared, id, in.o.Shared)
	}
	if err != nil {
		return false, fmt.Errorf("instances: probe of %s: %w", id, err)
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("instances: probe of %s: %w", id, err)
	}
	return false, nil // closing the file lets the lock go
}

// sweepProbes removes the probes no live process holds, but for those of
// the instances in live, whose fate checkShared decides: what a crash
// left behind.
func (in *Instance) sweepProbes(live map[string]time.Time) {
	names, err := os.ReadDir(in.o.Shared)
	if err != nil {
		return
	}
	for _, e := range names {
		id, ok := strings.CutSuffix(e.Name(), probeSuffix)
		if _, isLive := live[id]; !ok || isLive || id == in.o.ID {
			continue
		}
		f, err := os.OpenFile(in.probePath(id), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.Remove(f.Name())
		}
		f.Close()
	}
}
