//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"atelier/internal/txwatch"
)

// KillAll sends SIGKILL to every process of uid and returns once none is
// left alive. It finds them in /proc by real, effective, saved and file
// system uid, so it reaches what left the command's session or process
// group (setsid, nohup, double-forked daemons), and in the uid's cgroup
// when cgroups are in use. It sweeps again until two sweeps in a row find
// nothing, which catches processes forked while the kill went on. It gives
// up with ErrProcessesLeft when ctx ends, or after 10 s when ctx has no
// deadline. Zombies count as ended: they run nothing and their parent or
// init reaps them.
//
// A Run or Start of the same uid that begins while KillAll runs may
// survive it; callers stop starting commands of a session before they kill
// it.
func (s *Sandbox) KillAll(ctx context.Context, uid uint32) error {
	txwatch.Slow(ctx, "sandbox kill")
	if !s.inRange(uid) {
		return fmt.Errorf("%w: uid %d is outside the sandbox's range", ErrBadSpec, uid)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, killWait)
		defer cancel()
	}
	if s.cg != nil {
		s.cg.killAll(uid)
	}
	err := killLoop(ctx, func() (int, error) {
		live := 0
		if s.cg != nil {
			live += s.cg.killMembers(uid)
		}
		n, err := signalUID(uid, unix.SIGKILL)
		return live + n, err
	}, fmt.Sprintf("uid %d", uid))
	if err != nil {
		return err
	}
	if s.cg != nil {
		s.groups.Lock()
		err := s.cg.remove(uid)
		s.groups.Unlock()
		if err != nil {
			s.log.Warn("sandbox: cgroup not removed", "uid", uid, "err", err)
		}
	}
	return nil
}

// signalUID sends sig to every process of uid and returns how many of them
// were alive.
func signalUID(uid uint32, sig unix.Signal) (int, error) {
	live := 0
	err := scanProcs(func(p int) {
		if signalIf(p, sig, func() (bool, bool) { return hasUID(p, uid) }) {
			live++
		}
	})
	return live, err
}

// killLoop runs sweep, which kills and counts live processes, until two
// sweeps in a row count none, or ctx ends.
func killLoop(ctx context.Context, sweep func() (int, error), what string) error {
	delay := time.Millisecond
	clean := 0
	for {
		live, err := sweep()
		if err != nil {
			return fmt.Errorf("sandbox: kill %s: %w", what, err)
		}
		if live == 0 {
			if clean++; clean == 2 {
				return nil
			}
			continue
		}
		clean = 0
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %d processes of %s still alive", ErrProcessesLeft, live, what)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// scanProcs calls fn with the pid of every process in /proc.
func scanProcs(fn func(pid int)) error {
	d, err := os.Open("/proc")
	if err != nil {
		return err
	}
	defer d.Close()
	self := os.Getpid()
	for {
		names, err := d.Readdirnames(512)
		for _, name := range names {
			pid, perr := strconv.Atoi(name)
			if perr != nil || pid <= 0 || pid == self {
				continue
			}
			fn(pid)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// signalIf sends sig to pid when match says the process is one to signal,
// and reports whether it was a live match. The process is pinned with a
// pidfd before match looks at it, so a pid that is reused in between never
// gets the signal.
func signalIf(pid int, sig unix.Signal, match func() (ok, live bool)) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		return false
	}
	if err != nil {
		// No pidfd (an old kernel, no fds left): the plain way.
		ok, live := match()
		if ok {
			unix.Kill(pid, sig)
		}
		return ok && live
	}
	defer unix.Close(fd)
	ok, live := match()
	if !ok {
		return false
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err == unix.ESRCH {
		return false
	}
	return live
}

// hasUID reports whether process pid has uid among its real, effective,
// saved and file system uids, and whether it is alive (not a zombie).
func hasUID(pid int, uid uint32) (ok, live bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, false
	}
	var state byte
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("State:")):
			if f := bytes.Fields(line[len("State:"):]); len(f) > 0 {
				state = f[0][0]
			}
		case bytes.HasPrefix(line, []byte("Uid:")):
			for _, f := range bytes.Fields(line[len("Uid:"):]) {
				if n, err := strconv.ParseUint(string(f), 10, 32); err == nil && uint32(n) == uid {
					ok = true
				}
			}
		}
	}
	return ok, ok && alive(state)
}

// statOf reads the state and session of pid from /proc/PID/stat, whose
// fields after the command name in parentheses are state, ppid, pgrp,
// session.
func statOf(pid int) (state byte, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) == 0 {
		return 0, 0, false
	}
	sid, err = strconv.Atoi(string(f[3]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], sid, true
}

func alive(state byte) bool {
	return state != 0 && state != 'Z' && state != 'X'
}
