package server

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
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

// A session's disk is bounded: writing past it fails with ENOSPC in the
// checkout, in HOME and in /tmp, the host's file system gives it no more than its
// size, and its image goes with the session.
func TestSessionDiskBound(t *testing.T) {
	needRoot(t)
	const size = 64 << 20
	h := newHarness(t, func(c *Config) { c.SandboxDiskBytes = size })
	owner, id := editable(t, h)
	s, base := owner.session(id)
	before := freeOf(t, h.cfg.DataDir)
	out, res := owner.run(base, `head -c 200M /dev/zero > big; echo "exit $?"; head -c 1M /dev/zero > "$HOME/more"; echo "exit $?"; head -c 1M /dev/zero > /tmp/more; echo "exit $?"`, "")
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
	if images, _ := filepath.Glob(filepath.Join(h.cfg.SandboxDiskDir(), "*.img")); len(images) != 1 {
		t.Fatalf("images of one session: %v", images)
	}
	owner.post(base+"/discard", nil, jsonAccept)
	if images, _ := filepath.Glob(filepath.Join(h.cfg.SandboxDiskDir(), "*")); len(images) != 0 {
		t.Errorf("images after the session ended: %v", images)
	}
	if _, err := os.Lstat(top); !os.IsNotExist(err) {
		t.Errorf("the session's folder %s survived its end: %v", top, err)
	}
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
