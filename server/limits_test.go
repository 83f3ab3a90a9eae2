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
	"time"

	"golang.org/x/sys/unix"
)

// With two commands running, a third (here queued behind its session's
// first) is refused at once with 429 sandbox_busy and a Retry-After; once
// they end, commands run again.
func TestSandboxBusyBeyondMaxRunning(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.SandboxMaxRunning = 2 })
	owner, id := editable(t, h)
	other := h.user("other", false)
	owner.addMember(id, "other", "admin")
	s1, base := owner.session(id)
	s2, _ := other.openSession(id)
	otherBase := "/projects/" + itoa(id) + "/sessions/" + s2.ID
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
	if !eventuallyTrue(15*time.Second, func() bool {
		for _, co := range checkouts {
			if _, err := os.Stat(filepath.Join(co, "running")); err != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the two commands did not start")
	}
	res := owner.post(base+"/commands", url.Values{"command": {"echo third"}}, jsonAccept)
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
	counted := eventuallyTrue(15*time.Second, func() bool {
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
	if !eventuallyTrue(5*time.Second, func() bool { return memory() < memBefore+16<<20 }) {
		t.Errorf("the sandboxes' memory is %d after the command, %d before: /dev/shm outlived it", memory(), memBefore)
	}
	if _, err := os.Lstat("/dev/shm/" + shmName); err == nil {
		t.Errorf("the command's /dev/shm file is in the host's /dev/shm")
	}
	if grown := usedOf(t, "/dev/shm") - shmBefore; grown > 32<<20 {
		t.Errorf("the host's /dev/shm grew by %d bytes", grown)
	}

	// Taken right before, since other processes write to the host's disk.
	before := freeOf(t, h.cfg.DataDir)
	out, res := owner.run(base, `head -c 3G /dev/zero > /tmp/x; echo "exit $?"; head -c 3G /dev/zero > /workspace/x; echo "exit $?"; head -c 1M /dev/zero > "$HOME/more"; echo "exit $?"`, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", res.StatusCode, readBody(res))
	}
	if strings.Count(out.Stderr, "No space left on device") != 3 || strings.Count(out.Stdout, "exit 1\n") != 3 {
		t.Errorf("writing past a %d byte disk: %+v", size, out)
	}
	if used := before - freeOf(t, h.cfg.DataDir); used > size+8<<20 {
		t.Errorf("the host gave %d bytes to a session's %d byte disk", used, size)
	}
	top := filepath.Dir(hostCheckout(t, h, s.ID))
	images, _ := filepath.Glob(filepath.Join(h.cfg.SandboxDiskDir(), "*.img"))
	if len(images) != 1 {
		t.Fatalf("images of one session: %v", images)
	}
	var st unix.Stat_t
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
	if !eventuallyTrue(5*time.Second, func() bool { return memory() < memBefore+16<<20 }) {
		t.Errorf("the sandboxes' memory is %d after the session ended, %d before", memory(), memBefore)
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
	if cfg.SandboxMaxRunning < 2 || cfg.SandboxDiskBytes != 2<<30 || cfg.Sandbox.MaxMemoryTotal != 0 {
		t.Errorf("defaults: max running %d, disk %d, memory total %d", cfg.SandboxMaxRunning, cfg.SandboxDiskBytes, cfg.Sandbox.MaxMemoryTotal)
	}
	env = map[string]string{"ATELIER_SANDBOX_MAX_RUNNING": "3", "ATELIER_SANDBOX_DISK_BYTES": "0", "ATELIER_SANDBOX_MEMORY_TOTAL": "1073741824"}
	if cfg, err = LoadConfig(getenv); err != nil {
		t.Fatal(err)
	}
	if cfg.SandboxMaxRunning != 3 || cfg.SandboxDiskBytes != 0 || cfg.Sandbox.MaxMemoryTotal != 1<<30 {
		t.Errorf("set: max running %d, disk %d, memory total %d", cfg.SandboxMaxRunning, cfg.SandboxDiskBytes, cfg.Sandbox.MaxMemoryTotal)
	}
	for k, v := range map[string]string{"ATELIER_SANDBOX_MAX_RUNNING": "0", "ATELIER_SANDBOX_DISK_BYTES": "1000", "ATELIER_SANDBOX_MEMORY_TOTAL": "lots"} {
		env = map[string]string{k: v}
		if _, err := LoadConfig(getenv); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err = %v", k, v, err)
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

func eventuallyTrue(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}
