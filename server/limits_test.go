package server

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"atelier/testrig/wait"
)

// With two commands running, a third person's is refused at once with 429
// sandbox_busy and a Retry-After; once they end, commands run again.
func TestSandboxBusyBeyondMaxRunning(t *testing.T) {
	needRoot(t)
	sandboxBusyBeyondMaxRunning(t, newHarness(t, func(c *Config) { c.SandboxMaxRunning = 2 }))
}

func TestSandboxBusyBeyondMaxRunningInAPod(t *testing.T) {
	needRoot(t)
	sandboxBusyBeyondMaxRunning(t, newHarness(t, onKube(t), func(c *Config) { c.SandboxMaxRunning = 2 }))
}

func sandboxBusyBeyondMaxRunning(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	other, third := h.user("other", false), h.user("third", false)
	owner.addMember(id, "other", "admin")
	owner.addMember(id, "third", "admin")
	s1, base := owner.session(id)
	s2, _ := other.openSession(id)
	otherBase := "/projects/" + itoa(id) + "/sessions/" + s2.ID
	_, thirdBase := third.session(id)
	var checkouts []string
	for _, run := range []struct {
		c    *client
		base string
		id   string
	}{{owner, base, s1.ID}, {other, otherBase, s2.ID}} {
		if _, res := run.c.run(run.base, "true", ""); res.StatusCode != http.StatusOK {
			t.Fatalf("first command: %d %s", res.StatusCode, readBody(res))
		}
		checkouts = append(checkouts, hostCheckout(t, h, run.id))
	}

	var wg sync.WaitGroup
	results := make([]*http.Response, 2)
	for i, run := range []struct {
		c    *client
		base string
	}{{owner, base}, {other, otherBase}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run.c.post(run.base+"/commands", url.Values{"command": {"touch running; sleep 4"}}, jsonAccept)
		}()
	}
	if !wait.Until(wait.Long, func() bool {
		for _, co := range checkouts {
			if _, err := os.Stat(filepath.Join(co, "running")); err != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the two commands did not start")
	}
	res := third.post(thirdBase+"/commands", url.Values{"command": {"echo third"}}, jsonAccept)
	if got := res.Header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After = %q, want 5", got)
	}
	expectProblem(t, res, http.StatusTooManyRequests, "sandbox_busy")
	wg.Wait()
	for i, r := range results {
		if r.StatusCode != http.StatusOK {
			t.Errorf("command %d: %d %s", i, r.StatusCode, readBody(r))
		}
	}
	if out, res := owner.run(base, "echo again", ""); res.StatusCode != http.StatusOK || out.Stdout != "again\n" {
		t.Errorf("after the two ended: %d %+v", res.StatusCode, out)
	}
}

// One person holds at most half the instance's command slots, rounded up:
// of three, alice's two sleeps run, her third command is refused with a
// reason of her own and a Retry-After, and bob's runs in the slot kept for
// everybody else.
func TestCommandSlotsShared(t *testing.T) {
	needRoot(t)
	commandSlotsShared(t, newHarness(t, func(c *Config) { c.SandboxMaxRunning = 3 }))
}

func TestCommandSlotsSharedInAPod(t *testing.T) {
	needRoot(t)
	commandSlotsShared(t, newHarness(t, onKube(t), func(c *Config) { c.SandboxMaxRunning = 3 }))
}

func commandSlotsShared(t *testing.T, h *harness) {
	alice, id := editable(t, h)
	second := alice.createProject("second")
	bob := h.user("bob", false)
	alice.addMember(id, "bob", "admin")
	var bases, checkouts []string
	for _, p := range []int64{id, second} {
		s, base := alice.session(p)
		if _, res := alice.run(base, "true", ""); res.StatusCode != http.StatusOK {
			t.Fatalf("first command: %d %s", res.StatusCode, readBody(res))
		}
		bases, checkouts = append(bases, base), append(checkouts, hostCheckout(t, h, s.ID))
	}
	_, bobBase := bob.session(id)

	var wg sync.WaitGroup
	results := make([]*http.Response, len(bases))
	for i, base := range bases {
		wg.Go(func() {
			results[i] = alice.post(base+"/commands", url.Values{"command": {"touch running; sleep 4"}}, jsonAccept)
		})
	}
	if !wait.Until(wait.Long, func() bool {
		for _, co := range checkouts {
			if _, err := os.Stat(filepath.Join(co, "running")); err != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatal("alice's two commands did not start")
	}
	res := alice.post(bases[0]+"/commands", url.Values{"command": {"echo third"}}, jsonAccept)
	if got := res.Header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After = %q, want 5", got)
	}
	p := expectProblem(t, res, http.StatusTooManyRequests, "sandbox_busy_person")
	if !strings.Contains(p.Error, "one person") || !strings.Contains(p.Error, "2 of its 3") {
		t.Errorf("the refusal does not say it is her own share: %q", p.Error)
	}
	if out, res := bob.run(bobBase, "true", ""); res.StatusCode != http.StatusOK || out.ExitCode != 0 {
		t.Errorf("bob's command while alice holds her share: %d %s", res.StatusCode, readBody(res))
	}
	wg.Wait()
	for i, r := range results {
		if r.StatusCode != http.StatusOK {
			t.Errorf("alice's command %d: %d %s", i, r.StatusCode, readBody(r))
		}
	}
	if out, res := alice.run(bases[0], "echo again", ""); res.StatusCode != http.StatusOK || out.Stdout != "again\n" {
		t.Errorf("alice after her commands ended: %d %+v", res.StatusCode, out)
	}
}

// TestSessionDiskBound: 3 GiB written into /dev/shm, /tmp and /workspace
// each stop at their limit, seen from the host: the command's /dev/shm
// counts against the sandboxes' memory while it lasts and goes with the
// command, leaving nothing in the host's /dev/shm; the session's disk
// takes no more of the host's file system than its size; and once the
// session ends, the sandboxes' memory is back where it was.
func TestSessionDiskBound(t *testing.T) {
	needRoot(t)
	const size = 64 << 20
	// A parent group of this test's own, so other tests' commands on the
	// host do not move its memory.
	parent := fmt.Sprintf("atelier-sandbox-bound-%d", os.Getpid())
	memory := parentMemory(t, parent)
	h := newHarness(t, func(c *Config) { c.SandboxDiskBytes = size; c.Sandbox.CgroupParent = parent })
	owner, id := editable(t, h)
	s, base := owner.session(id)
	shmName := fmt.Sprintf("atelier-bound-%d", os.Getpid())
	t.Cleanup(func() { os.Remove("/dev/shm/" + shmName) })
	shmBefore, memBefore := usedOf(t, "/dev/shm"), memory()

	type result struct {
		out commandJSON
		res *http.Response
	}
	ran := make(chan result, 1)
	go func() {
		out, res := owner.run(base, `head -c 3G /dev/zero > /dev/shm/`+shmName+`; echo "exit $?"; sleep 5`, "")
		ran <- result{out, res}
	}()
	var peak int64
	counted := wait.Until(wait.Long, func() bool {
		peak = max(peak, memory())
		return peak >= memBefore+48<<20 // three quarters of the command's 64 MiB /dev/shm
	})
	r := <-ran
	if r.res.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", r.res.StatusCode, readBody(r.res))
	}
	if !strings.Contains(r.out.Stderr, "No space left on device") || r.out.Stdout != "exit 1\n" {
		t.Errorf("3 GiB into /dev/shm: %+v", r.out)
	}
	t.Logf("the sandboxes' memory: %d before, %d once /dev/shm filled", memBefore, peak)
	if !counted {
		t.Errorf("the sandboxes' memory went from %d to at most %d while /dev/shm was full: its pages escaped the cgroup", memBefore, peak)
	}
	if !wait.Until(wait.Short, func() bool { return memory() < memBefore+16<<20 }) {
		t.Errorf("the sandboxes' memory is %d after the command, %d before: /dev/shm outlived it", memory(), memBefore)
	}
	if _, err := os.Lstat("/dev/shm/" + shmName); err == nil {
		t.Errorf("the command's /dev/shm file is in the host's /dev/shm")
	}
	if grown := usedOf(t, "/dev/shm") - shmBefore; grown > 32<<20 {
		t.Errorf("the host's /dev/shm grew by %d bytes", grown)
	}

	out, res := owner.run(base, `head -c 3G /dev/zero > /tmp/x; echo "exit $?"; head -c 3G /dev/zero > /workspace/x; echo "exit $?"; head -c 1M /dev/zero > "$HOME/more"; echo "exit $?"`, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", res.StatusCode, readBody(res))
	}
	if strings.Count(out.Stderr, "No space left on device") != 3 || strings.Count(out.Stdout, "exit 1\n") != 3 {
		t.Errorf("writing past a %d byte disk: %+v", size, out)
	}
	top := filepath.Dir(hostCheckout(t, h, s.ID))
	images, _ := filepath.Glob(filepath.Join(h.cfg.SandboxDiskDir(), "*.img"))
	if len(images) != 1 {
		t.Fatalf("images of one session: %v", images)
	}
	var st unix.Stat_t
	// What the host gave the disk is what its image holds, whatever else
	// writes to the host's disk meanwhile.
	if err := unix.Stat(images[0], &st); err != nil || st.Blocks*512 > size {
		t.Errorf("the session's disk image holds %d bytes of the host's disk (%v); its size is %d", st.Blocks*512, err, size)
	}
	owner.post(base+"/discard", nil, jsonAccept)
	if images, _ := filepath.Glob(filepath.Join(h.cfg.SandboxDiskDir(), "*")); len(images) != 0 {
		t.Errorf("images after the session ended: %v", images)
	}
	if _, err := os.Lstat(top); !os.IsNotExist(err) {
		t.Errorf("the session's folder %s survived its end: %v", top, err)
	}
	// The disk's cached pages went with it.
	if !wait.Until(wait.Short, func() bool { return memory() < memBefore+16<<20 }) {
		t.Errorf("the sandboxes' memory is %d after the session ended, %d before", memory(), memBefore)
	}
}

// ATELIER_SANDBOX_DISK_TOTAL bounds all sessions' disks together, each
// counted whole: with room for two, a third person's opening is a 507
// sandbox_disk_full that says why, and the open sessions can still fill
// their own disks; once one ends, the third opens.
func TestSessionsDiskTotal(t *testing.T) {
	needRoot(t)
	const size = 64 << 20
	h := newHarness(t, func(c *Config) { c.SandboxDiskBytes, c.SandboxDiskTotal = size, 2*size+size/2 })
	var people []*client
	var projects []int64
	for _, name := range []string{"alice", "bob", "carol"} {
		c := h.user(name, false)
		people, projects = append(people, c), append(projects, c.createProject(name+"s"))
	}
	_, alice := people[0].session(projects[0])
	people[1].session(projects[1])
	res := people[2].post("/projects/"+itoa(projects[2])+"/sessions", nil, jsonAccept)
	p := expectProblem(t, res, http.StatusInsufficientStorage, "sandbox_disk_full")
	if !strings.Contains(p.Error, "the 2 sessions on it hold 128 MiB of the 160 MiB") {
		t.Errorf("the refusal does not say why: %q", p.Error)
	}
	out, res := people[0].run(alice, `head -c 100M /dev/zero > /workspace/x; stat -c %s /workspace/x`, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", res.StatusCode, readBody(res))
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(out.Stdout)); n < size*3/4 {
		t.Errorf("an open session filled %d bytes of its %d byte disk once the total was reached: %+v", n, size, out)
	}
	if res := people[0].post(alice+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("discard: %d %s", res.StatusCode, readBody(res))
	}
	if _, status := people[2].openSession(projects[2]); status != http.StatusCreated {
		t.Errorf("the third once one ended: %d", status)
	}
}

// parentMemory reads the memory in use by the sandboxes' parent group
// named parent (memory.current on cgroup v2, memory.usage_in_bytes on v1),
// and removes the group when the test ends.
func parentMemory(t *testing.T, parent string) func() int64 {
	t.Helper()
	v1, v2 := "/sys/fs/cgroup/memory/"+parent, "/sys/fs/cgroup/"+parent
	t.Cleanup(func() {
		for _, ctrl := range []string{"memory", "pids", "cpu"} {
			unix.Rmdir("/sys/fs/cgroup/" + ctrl + "/" + parent)
		}
		unix.Rmdir(v2)
	})
	file := v1 + "/memory.usage_in_bytes"
	if st, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil && st.Mode().IsRegular() {
		file = v2 + "/memory.current"
	} else if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("precondition: a memory cgroup hierarchy at /sys/fs/cgroup (v2) or /sys/fs/cgroup/memory (v1)")
	}
	return func() int64 {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("the sandboxes' memory: %v", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func usedOf(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

func TestSandboxLimitsConfig(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	cfg, err := LoadConfig(getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SandboxMaxRunning < 2 || cfg.SandboxDiskBytes != 2<<30 || cfg.Sandbox.MaxMemoryTotal != 0 || cfg.Sessions.MaxPerUser != 4 ||
		cfg.SandboxCacheBytes != 2<<30 {
		t.Errorf("defaults: max running %d, disk %d, memory total %d, sessions a person %d, cache %d",
			cfg.SandboxMaxRunning, cfg.SandboxDiskBytes, cfg.Sandbox.MaxMemoryTotal, cfg.Sessions.MaxPerUser, cfg.SandboxCacheBytes)
	}
	// The disks' total is half what the file system of the disk area has
	// free; the area does not exist yet, so its nearest folder that does
	// tells. Others write to the disk meanwhile: within 1 %.
	env = map[string]string{"ATELIER_DATA": filepath.Join(t.TempDir(), "not", "yet")}
	if cfg, err = LoadConfig(getenv); err != nil {
		t.Fatal(err)
	}
	if half := freeOf(t, filepath.Dir(filepath.Dir(cfg.DataDir))) / 2; cfg.SandboxDiskTotal < half*99/100 || cfg.SandboxDiskTotal > half*101/100 {
		t.Errorf("default disk total %d, want about half of what is free, %d", cfg.SandboxDiskTotal, half)
	}
	if quarter := freeOf(t, filepath.Dir(filepath.Dir(cfg.DataDir))) / 4; cfg.SandboxCacheTotal < quarter*99/100 || cfg.SandboxCacheTotal > quarter*101/100 {
		t.Errorf("default cache total %d, want about a quarter of what is free, %d", cfg.SandboxCacheTotal, quarter)
	}
	env = map[string]string{"ATELIER_SANDBOX_MAX_RUNNING": "3", "ATELIER_SANDBOX_DISK_BYTES": "0", "ATELIER_SANDBOX_MEMORY_TOTAL": "1073741824",
		"ATELIER_SANDBOX_DISK_TOTAL": "5000000000", "ATELIER_MAX_SESSIONS_PER_USER": "2"}
	if cfg, err = LoadConfig(getenv); err != nil {
		t.Fatal(err)
	}
	if cfg.SandboxMaxRunning != 3 || cfg.SandboxDiskBytes != 0 || cfg.Sandbox.MaxMemoryTotal != 1<<30 ||
		cfg.SandboxDiskTotal != 5_000_000_000 || cfg.Sessions.MaxPerUser != 2 {
		t.Errorf("set: max running %d, disk %d, memory total %d, disk total %d, sessions a person %d", cfg.SandboxMaxRunning,
			cfg.SandboxDiskBytes, cfg.Sandbox.MaxMemoryTotal, cfg.SandboxDiskTotal, cfg.Sessions.MaxPerUser)
	}
	env = map[string]string{"ATELIER_SANDBOX_DISK_TOTAL": "0"}
	if cfg, err = LoadConfig(getenv); err != nil || cfg.SandboxDiskTotal != 0 {
		t.Errorf("no bound on the disks' total: %d, %v", cfg.SandboxDiskTotal, err)
	}
	for v, want := range map[string]int64{"0": 0, "16777216": 16 << 20} {
		env = map[string]string{"ATELIER_SANDBOX_CACHE_BYTES": v, "ATELIER_SANDBOX_CACHE_TOTAL": "33554432"}
		if cfg, err = LoadConfig(getenv); err != nil || cfg.SandboxCacheBytes != want || cfg.SandboxCacheTotal != min(want, 1)*32<<20 {
			t.Errorf("ATELIER_SANDBOX_CACHE_BYTES=%s: %d, total %d, %v", v, cfg.SandboxCacheBytes, cfg.SandboxCacheTotal, err)
		}
	}
	env = map[string]string{"ATELIER_SANDBOX_CACHE_TOTAL": "0"}
	if cfg, err = LoadConfig(getenv); err != nil || cfg.SandboxCacheTotal != 0 {
		t.Errorf("no bound on the caches' total: %d, %v", cfg.SandboxCacheTotal, err)
	}
	for _, c := range []struct{ k, v string }{
		{"ATELIER_SANDBOX_MAX_RUNNING", "0"}, {"ATELIER_SANDBOX_DISK_BYTES", "1000"}, {"ATELIER_SANDBOX_MEMORY_TOTAL", "lots"},
		// Below one session's disk of the default 2 GiB, every opening
		// would be refused.
		{"ATELIER_SANDBOX_DISK_TOTAL", "1000000000"}, {"ATELIER_SANDBOX_DISK_TOTAL", "-1"}, {"ATELIER_SANDBOX_DISK_TOTAL", "lots"},
		{"ATELIER_MAX_SESSIONS_PER_USER", "0"}, {"ATELIER_MAX_SESSIONS_PER_USER", "four"},
		{"ATELIER_SANDBOX_CACHE_BYTES", "1000"}, {"ATELIER_SANDBOX_CACHE_BYTES", "lots"},
		// Below one project's cache of the default 2 GiB.
		{"ATELIER_SANDBOX_CACHE_TOTAL", "1000000000"}, {"ATELIER_SANDBOX_CACHE_TOTAL", "lots"},
	} {
		env = map[string]string{c.k: c.v}
		if _, err := LoadConfig(getenv); err == nil || !strings.Contains(err.Error(), c.k) {
			t.Errorf("%s=%s: err = %v", c.k, c.v, err)
		}
	}
}

func freeOf(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}
