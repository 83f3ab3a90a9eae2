//go:build linux

package inpod

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// killRounds bounds killTree: a command forking as fast as it can is
// still found and killed within a few rounds, each of which kills every
// process it sees.
const killRounds = 100

type proc struct {
	pid, ppid int
	zombie    bool
}

// killTree SIGKILLs every descendant of the helper, round after round,
// until two rounds in a row find none alive, reaping the zombies
// reparented to it. spare is the main process while its status is still
// to be collected by its Wait, which a reap here would steal. It returns
// how many were alive in the last round when it gave up.
func killTree(spare int) int {
	self := os.Getpid()
	return killLoop(func() []proc { return descendants(self) }, spare)
}

// killLoop SIGKILLs the processes that list finds, round after round,
// until two rounds in a row find none alive; those it may not signal do
// not count. It reaps the zombies that are the helper's children, but
// spare, and returns how many were alive in the last round when it gave
// up.
func killLoop(list func() []proc, spare int) int {
	self := os.Getpid()
	quiet, live := 0, 0
	for round := 0; round < killRounds; round++ {
		live = 0
		for _, p := range list() {
			if p.zombie {
				if p.ppid == self && p.pid != spare {
					var ws unix.WaitStatus
					_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
				}
				continue
			}
			if err := unix.Kill(p.pid, unix.SIGKILL); err == nil {
				live++
			}
		}
		if live == 0 {
			quiet++
			if quiet == 2 {
				return 0
			}
		} else {
			quiet = 0
		}
		time.Sleep(time.Duration(min(round+1, 20)) * time.Millisecond)
	}
	return live
}

// descendants lists the processes whose parent chain leads to pid.
func descendants(pid int) []proc {
	children := make(map[int][]proc)
	for _, p := range procs() {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// procs lists the processes in /proc. Reading it is racy by nature:
// killLoop's rounds make up for it.
func procs() []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(n); ok {
			out = append(out, p)
		}
	}
	return out
}

// readProc reads a process's parent and state from /proc/PID/stat, whose
// second field, the command's name, may hold spaces and parentheses.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return proc{}, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, zombie: f[0][0] == 'Z' || f[0][0] == 'X'}, true
}
