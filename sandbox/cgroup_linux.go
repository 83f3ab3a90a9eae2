//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"atelier/sandbox/injail"
)

// DefaultCgroupParent is the group the sandbox makes at the top of each
// hierarchy it uses; every uid gets a group u<uid> inside it.
const DefaultCgroupParent = "atelier-sandbox"

// cgroups are the memory and pids groups of sessions. With cgroup v1 the
// two controllers live in two hierarchies; with v2 they share one.
type cgroups struct {
	v2       bool
	group    string   // the parent's name, DefaultCgroupParent unless configured
	parents  []string // atelier-sandbox in each hierarchy used: v1 memory, pids[, cpu]
	cpu      bool     // the cpu controller is in use (limits_linux.go)
	maxProcs int
	maxMem   int64

	mu   sync.Mutex
	made map[uint32]bool // the uids whose groups this process made
}

type cgroupMount struct {
	point  string
	fstype string
	opts   []string // super options: the v1 controllers
}

// findCgroups returns usable cgroups under root ("" = anywhere), or why
// there are none.
func findCgroups(root, group string, maxProcs int, maxMem int64) (*cgroups, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var memV1, pidsV1, cpuV1, v2 string
	for _, m := range mounts {
		if root != "" && m.point != root && !strings.HasPrefix(m.point, strings.TrimSuffix(root, "/")+"/") {
			continue
		}
		// Both v1 controllers may share one hierarchy; then both of its
		// groups are the same directory, which works the same.
		if m.fstype == "cgroup" && slices.Contains(m.opts, "memory") && memV1 == "" {
			memV1 = m.point
		}
		if m.fstype == "cgroup" && slices.Contains(m.opts, "pids") && pidsV1 == "" {
			pidsV1 = m.point
		}
		if m.fstype == "cgroup" && slices.Contains(m.opts, "cpu") && cpuV1 == "" {
			cpuV1 = m.point
		}
		if m.fstype == "cgroup2" && v2 == "" {
			v2 = m.point
		}
	}
	cg := &cgroups{group: group, maxProcs: maxProcs, maxMem: maxMem}
	var errs []error
	if memV1 != "" && pidsV1 != "" {
		err := cg.setUpV1(memV1, pidsV1, cpuV1)
		if err == nil {
			return cg, nil
		}
		errs = append(errs, err)
	}
	if v2 != "" {
		err := cg.setUpV2(v2)
		if err == nil {
			return cg, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, errors.New("no cgroup hierarchy with the memory and pids controllers")
	}
	return nil, errors.Join(errs...)
}

func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 || (rf[0] != "cgroup" && rf[0] != "cgroup2") {
			continue
		}
		out = append(out, cgroupMount{point: lf[4], fstype: rf[0], opts: strings.Split(rf[2], ",")})
	}
	return out, sc.Err()
}

func (c *cgroups) setUpV1(mem, pids, cpu string) error {
	for _, h := range []string{mem, pids} {
		dir := filepath.Join(h, c.group)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup v1: %w", err)
		}
		c.parents = append(c.parents, dir)
	}
	// The cpu controller is a bonus: without it, commands run with the
	// memory and pids limits only.
	if cpu != "" && cpu != mem && cpu != pids {
		dir := filepath.Join(cpu, c.group)
		if err := os.Mkdir(dir, 0o755); err == nil || errors.Is(err, fs.ErrExist) {
			c.parents = append(c.parents, dir)
			c.cpu = true
		}
	}
	return nil
}

func (c *cgroups) setUpV2(h string) error {
	ctrl, err := os.ReadFile(filepath.Join(h, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	if f := strings.Fields(string(ctrl)); !slices.Contains(f, "memory") || !slices.Contains(f, "pids") {
		return errors.New("cgroup v2: the memory and pids controllers are not available")
	}
	// A cgroup holding processes cannot pass controllers down (except the
	// root): a server in a container's own cgroup lands here and gets
	// rlimits only.
	if err := injail.WriteCgroup(filepath.Join(h, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	dir := filepath.Join(h, c.group)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	if err := injail.WriteCgroup(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	// The cpu controller is a bonus, as in v1.
	c.cpu = injail.WriteCgroup(filepath.Join(h, "cgroup.subtree_control"), "+cpu") == nil &&
		injail.WriteCgroup(filepath.Join(dir, "cgroup.subtree_control"), "+cpu") == nil
	c.v2 = true
	c.parents = []string{dir}
	return nil
}

func (c *cgroups) mode() string {
	if c.v2 {
		return "v2"
	}
	return "v1"
}

func uidGroup(uid uint32) string { return "u" + strconv.FormatUint(uint64(uid), 10) }

// dirs are uid's groups: in v1 the memory one, then the pids one, then
// the cpu one when in use.
func (c *cgroups) dirs(uid uint32) []string {
	out := make([]string, len(c.parents))
	for i, p := range c.parents {
		out[i] = filepath.Join(p, uidGroup(uid))
	}
	return out
}

// ensure makes uid's groups with their limits and returns the files a
// process writes its pid to in order to join them.
func (c *cgroups) ensure(uid uint32) ([]string, error) {
	c.mu.Lock()
	if c.made == nil {
		c.made = map[uint32]bool{}
	}
	c.made[uid] = true
	c.mu.Unlock()
	dirs := c.dirs(uid)
	var procs []string
	for i, dir := range dirs {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox: cgroup: %w", err)
		}
		var limits [][2]string
		mem, pids := strconv.FormatInt(c.maxMem, 10), strconv.Itoa(c.maxProcs)
		switch {
		case c.v2:
			limits = [][2]string{{"memory.max", mem}, {"pids.max", pids}}
		case i == 0:
			limits = [][2]string{{"memory.limit_in_bytes", mem}}
		case i == 1:
			limits = [][2]string{{"pids.max", pids}}
		}
		for _, l := range limits {
			if err := injail.WriteCgroup(filepath.Join(dir, l[0]), l[1]); err != nil {
				return nil, fmt.Errorf("sandbox: cgroup: %w", err)
			}
		}
		// Swap must not be a way around the memory limit; these files
		// exist only when swap is accounted.
		if c.v2 {
			injail.WriteCgroup(filepath.Join(dir, "memory.swap.max"), "0")
		} else if i == 0 {
			injail.WriteCgroup(filepath.Join(dir, "memory.memsw.limit_in_bytes"), mem)
		}
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	return procs, nil
}

// killAll kills uid's v2 group at once; v1 has no such file.
func (c *cgroups) killAll(uid uint32) {
	if c.v2 {
		injail.WriteCgroup(filepath.Join(c.dirs(uid)[0], "cgroup.kill"), "1")
	}
}

// killMembers sends SIGKILL to every process in uid's groups and returns
// how many were alive.
func (c *cgroups) killMembers(uid uint32) int {
	live := 0
	suffix := "/" + c.group + "/" + uidGroup(uid)
	for _, dir := range c.dirs(uid) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 {
				continue
			}
			if signalIf(pid, unix.SIGKILL, func() (bool, bool) { return inCgroup(pid, suffix) }) {
				live++
			}
		}
	}
	return live
}

// inCgroup reports whether pid is in a group whose path ends in suffix, and
// whether it is alive.
func inCgroup(pid int, suffix string) (ok, live bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false, false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.HasSuffix(line, []byte(suffix)) {
			state, _, found := statOf(pid)
			return true, found && alive(state)
		}
	}
	return false, false
}

// remove deletes uid's groups; the next command makes them again.
func (c *cgroups) remove(uid uint32) error {
	var errs []error
	for _, dir := range c.dirs(uid) {
		if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// close removes the empty groups this process made. Other processes'
// groups, and the sandbox's own group that holds them all, stay: another
// server (or test) on the host may be between making a group and moving a
// command into it.
func (c *cgroups) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.made {
		for _, dir := range c.dirs(uid) {
			unix.Rmdir(dir) // fails, as it should, while the group has members
		}
	}
}
