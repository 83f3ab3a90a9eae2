package terminal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// killSession sends SIGKILL to the shell's process group and to every
// process of its session. The shell is the session leader (Setsid), so its
// pid names both; a shell with job control puts each job in a group of its
// own, which only the session finds. A process that starts a new session
// escapes this: the sandbox's kill (Options.Kill) is the thorough one.
//
// A pid whose process has exited is not reused while a group or session
// still carries its number, so after the shell has ended this reaches only
// what it left behind.
func killSession(pid int) error {
	if pid <= 0 {
		return nil
	}
	var errs []error
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		errs = append(errs, err)
	}
	// A killed process lives on until the kernel has torn it down, so the
	// session is asked again until nothing of it is alive; Close promises
	// that the shell's processes are gone, not only signalled.
	for deadline := time.Now().Add(killWait); ; time.Sleep(5 * time.Millisecond) {
		alive, err := aliveInSession(pid)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if len(alive) == 0 {
			return errors.Join(errs...)
		}
		if time.Now().After(deadline) {
			return errors.Join(append(errs, fmt.Errorf("processes %v of session %d outlived SIGKILL for %s", alive, pid, killWait))...)
		}
		for _, p := range alive {
			if err := unix.Kill(p, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
}

// killWait bounds how long killSession waits for killed processes to go.
const killWait = 2 * time.Second

// aliveInSession lists the processes of session sid that have not exited
// (zombies have: only their parent's wait is left).
func aliveInSession(sid int) ([]int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var alive []int
	for _, d := range procs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(p); ok && st.session == sid && st.state != 'Z' && st.state != 'X' {
			alive = append(alive, p)
		}
	}
	return alive, nil
}

// procStat is what we read of /proc/PID/stat.
type procStat struct {
	state   byte // R, S, D, Z, …
	pgrp    int
	session int
}

// readStat reads /proc/PID/stat, whose fields after the parenthesised
// command name are state, ppid, pgrp, session.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, false
	}
	pg, err1 := strconv.Atoi(string(f[2]))
	s, err2 := strconv.Atoi(string(f[3]))
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], pgrp: pg, session: s}, true
}
