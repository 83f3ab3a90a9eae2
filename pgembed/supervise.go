package pgembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Who runs the postmaster: the process of ours that starts it holds an
// exclusive flock on owner.lock for as long as the postmaster runs (a
// supervising server, for as long as it lives). The postmaster does not
// inherit the descriptor (Go opens files close-on-exec), so the lock goes
// with that process however it ends. A live postmaster whose lock nobody
// holds is therefore an orphan: a server that was killed left it, nobody
// will stop it with a server, and nobody will start it again if it dies.
// A supervising Start takes such an orphan over (stopOrphan); the other
// processes of ours (`user add`, `migrate`) use whatever runs.

// errOwnerAway: another live process of ours owns the cluster but runs no
// postmaster now; a supervisor between two starts.
var errOwnerAway = errors.New("the process of ours that runs the cluster has not started it again")

// Restarts of a supervised postmaster. The first comes restartMin after
// its end; the wait doubles after each start that fails and after each
// postmaster that exits within stableAfter of its start, up to restartMax,
// so a cluster that cannot run is retried without a busy loop.
const (
	restartMin  = 500 * time.Millisecond
	restartMax  = 30 * time.Second
	stableAfter = time.Minute
	// attachedPoll is how often a supervisor looks whether a postmaster
	// another process of ours runs (one we attached to) is still there.
	attachedPoll = 500 * time.Millisecond
	// orphanStopTimeout bounds an orphan's fast shutdown before it is
	// ended at once.
	orphanStopTimeout = 30 * time.Second
)

// takeOwner makes this process the cluster's owner unless it is already;
// false when another live process owns it.
func (s *starter) takeOwner() (bool, error) {
	s.ownerMu.Lock()
	defer s.ownerMu.Unlock()
	if s.owner != nil {
		return true, nil
	}
	f, err := os.OpenFile(filepath.Join(s.dir, ownerName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, fmt.Errorf("pgembed: %w", err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		_ = f.Close()
		return false, nil
	}
	if err != nil {
		_ = f.Close()
		return false, fmt.Errorf("pgembed: lock %s: %w", f.Name(), err)
	}
	s.owner = f
	return true, nil
}

// releaseOwner gives ownership up; it does nothing when we do not own.
func (s *starter) releaseOwner() {
	s.ownerMu.Lock()
	defer s.ownerMu.Unlock()
	if s.owner != nil {
		_ = s.owner.Close()
		s.owner = nil
	}
}

// stopOrphan shuts down a postmaster that no process of ours runs any
// more, so that this process can start it again as its own child: a fast
// shutdown (SIGINT), as Stop does, then an immediate one (SIGQUIT), then
// SIGKILL. It is not our child, so its end is watched in /proc; what a
// forced end leaves behind is cleared by the start that follows.
func (s *starter) stopOrphan(ctx context.Context, pid int) error {
	s.log.Warn("pgembed: PostgreSQL runs without the process that started it; stopping it to run it as ours",
		"pid", pid, "dir", s.dir)
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, orphanStopTimeout}, {syscall.SIGQUIT, killDelay}, {syscall.SIGKILL, killDelay}}
	for _, step := range steps {
		if err := syscall.Kill(pid, step.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgembed: stop the orphaned postmaster %d: %w", pid, err)
		}
		gone, err := s.waitEnd(ctx, pid, step.wait)
		if err != nil {
			return err
		}
		if gone {
			s.log.Info("pgembed: the orphaned PostgreSQL stopped", "pid", pid, "signal", step.sig.String())
			return nil
		}
		s.log.Warn("pgembed: the orphaned PostgreSQL did not stop in time", "pid", pid, "signal", step.sig.String(), "waited", step.wait)
	}
	return fmt.Errorf("pgembed: the orphaned postmaster %d of %s does not end", pid, s.dir)
}

// waitEnd waits up to d for pid to be no postmaster of the cluster any
// more (gone, or a zombie nobody reaped yet).
func (s *starter) waitEnd(ctx context.Context, pid int, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	for servesDataDir(pid, s.dataDir()) {
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("pgembed: wait for the orphaned postmaster %d: %w", pid, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true, nil
}

// supervise starts the supervisor, which Stop ends.
func (c *Cluster) supervise() {
	ctx, cancel := context.WithCancel(context.Background())
	c.endSupervisor, c.supervisorDone = cancel, make(chan struct{})
	go func() {
		defer close(c.supervisorDone)
		c.superviseUntil(ctx)
	}()
}

// superviseUntil starts the postmaster again each time it ends, until ctx
// ends. Connections meanwhile fail (the server answers 503
// database_unavailable), and the server's pool opens new ones once it is
// back: the socket, and so the DSN, stay the same.
func (c *Cluster) superviseUntil(ctx context.Context) {
	delay := restartMin
	for {
		pm := c.current()
		if !c.waitExit(ctx, pm) {
			return
		}
		if time.Since(pm.started) >= stableAfter {
			delay = restartMin
		}
		c.log.Error("pgembed: PostgreSQL exited; starting it again", "pid", pm.pid, "exit", pm.waitErr, "in", delay)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, restartMax)
			next, err := c.s.bringUp(ctx)
			if err == nil {
				c.mu.Lock()
				c.cur = next
				c.mu.Unlock()
				c.log.Info("pgembed: PostgreSQL runs again", "pid", next.pid, "owned", next.owned())
				break
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Error("pgembed: PostgreSQL did not start again; trying again", "err", err, "in", delay)
		}
	}
}

// waitExit waits for pm to end: ours is reaped, one we attached to is
// looked for in /proc. It is false when ctx ended first.
func (c *Cluster) waitExit(ctx context.Context, pm *postmaster) bool {
	if pm.owned() {
		select {
		case <-pm.exited:
			return true
		case <-ctx.Done():
			return false
		}
	}
	t := time.NewTicker(attachedPoll)
	defer t.Stop()
	for servesDataDir(pm.pid, c.s.dataDir()) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
