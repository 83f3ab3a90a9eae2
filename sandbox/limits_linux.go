//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"atelier/sandbox/injail"
)

// Each uid's group bounds one session; the parent group that holds them
// all bounds every session together, so that many sessions each within
// their own limits still leave the host its memory and processes.

// limitTotals sets the limits of all sandboxes together on the parent
// group: Config.MaxMemoryTotal (half the host's memory by default), half
// the tasks the host can have and, when the cpu controller is in use, the
// host's cores but half of one (cpuTotal). A limit that cannot be set is logged:
// the sessions' own limits still hold.
func (s *Sandbox) limitTotals() {
	mem := s.cfg.MaxMemoryTotal
	if mem <= 0 {
		host, err := hostMemory()
		if err != nil {
			s.log.Warn("sandbox: the memory of all sandboxes together is not limited", "err", err)
			return
		}
		mem = host / 2
	}
	tasks := hostTasks() / 2
	if err := s.cg.limitTotal(mem, tasks); err != nil {
		s.log.Warn("sandbox: the limits of all sandboxes together are not set", "err", err)
		return
	}
	s.log.Info("sandbox: limits of all sandboxes together", "memory", mem, "tasks", tasks, "cpu", s.cg.cpu)
}

// limitTotal writes the parent group's limits.
func (c *cgroups) limitTotal(mem int64, tasks int) error {
	m, t := strconv.FormatInt(mem, 10), strconv.Itoa(tasks)
	memDir, pidsDir := c.parents[0], c.parents[0]
	memFile, swapFile, swapValue := "memory.max", "memory.swap.max", "0"
	if !c.v2 {
		pidsDir = c.parents[1]
		memFile, swapFile, swapValue = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", m
	}
	// v1 keeps memory+swap at least memory: lowering both, memory goes
	// first; raising both, memory+swap does. Writing swap on both sides
	// covers either; its file exists only when swap is accounted.
	injail.WriteCgroup(filepath.Join(memDir, swapFile), swapValue)
	var errs []error
	if err := injail.WriteCgroup(filepath.Join(memDir, memFile), m); err != nil {
		errs = append(errs, fmt.Errorf("sandbox: cgroup %s: %w", memFile, err))
	}
	injail.WriteCgroup(filepath.Join(memDir, swapFile), swapValue)
	if err := injail.WriteCgroup(filepath.Join(pidsDir, "pids.max"), t); err != nil {
		errs = append(errs, fmt.Errorf("sandbox: cgroup pids.max: %w", err))
	}
	if c.cpu {
		quota := strconv.Itoa(cpuTotal(runtime.NumCPU()))
		var err error
		if c.v2 {
			err = injail.WriteCgroup(filepath.Join(c.parents[0], "cpu.max"), quota+" "+strconv.Itoa(cpuPeriod))
		} else if err = injail.WriteCgroup(filepath.Join(c.parents[2], "cpu.cfs_period_us"), strconv.Itoa(cpuPeriod)); err == nil {
			err = injail.WriteCgroup(filepath.Join(c.parents[2], "cpu.cfs_quota_us"), quota)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox: cgroup cpu quota: %w", err))
		}
	}
	return errors.Join(errs...)
}

// cpuPeriod is the period of the CPU quota, in microseconds (the kernel's
// default).
const cpuPeriod = 100_000

// cpuTotal is the CPU time all sandboxes together get per cpuPeriod: every
// core but half of one, which stays for the server and the host, and at
// least one core.
func cpuTotal(cores int) int {
	return max(cpuPeriod, cores*cpuPeriod-cpuPeriod/2)
}

// hostMemory is the host's memory in bytes, from /proc/meminfo.
func hostMemory() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("sandbox: /proc/meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("sandbox: /proc/meminfo has no MemTotal")
}

// hostTasks is how many processes and threads the host can have: the
// smaller of the kernel's pid and thread limits.
func hostTasks() int {
	n := 1 << 22
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		if b, err := os.ReadFile(f); err == nil {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
				n = min(n, v)
			}
		}
	}
	return n
}
