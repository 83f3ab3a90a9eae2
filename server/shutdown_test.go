package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/models"
	"atelier/testrig/wait"
)

// TestCleanShutdownTakesSessionsDown: a clean shutdown of the server ends
// what runs for a session whose checkout a command built on its disk (the
// helpers waiting for its next commands included), and leaves no mount in
// the session's folder and no loop device on its image; a command that
// comes after is refused. The project's cache is unmounted and kept. The
// session stays open with its edits, and a new server on the same data and
// database runs a command in it on a checkout built afresh, with the cache
// as it was.
func TestCleanShutdownTakesSessionsDown(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, id := editable(t, h)
	s, base := owner.session(id)
	owner.put(base, "src/main.go", []byte("edited\n"), nil)
	owner.mustRun(base, "echo made > made.txt && echo warm > ~/.cache/mark")
	top := filepath.Dir(hostCheckout(t, h, s.ID))
	image := filepath.Join(h.cfg.SandboxDiskDir(), s.ID+".img")
	if got := mountsBelow(t, top); len(got) < 2 {
		t.Fatalf("before the shutdown %s holds mounts %v; want the session's disk and its checkout's overlay", top, got)
	}
	loop := loopOf(t, image)
	if loop == "" {
		t.Fatalf("no loop device holds %s before the shutdown", image)
	}
	if helperChildren(t) == 0 {
		t.Fatal("no sandbox helper waits for the session's next command; the test needs one")
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := h.app.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := mountsBelow(t, top); len(got) != 0 {
		t.Fatalf("after the shutdown %s still holds mounts %v", top, got)
	}
	if n := helperChildren(t); n != 0 {
		t.Fatalf("%d sandbox helpers outlived the shutdown", n)
	}
	// The kernel detaches an autoclear loop device once its last user is
	// gone, a moment after the unmount.
	wait.For(t, wait.Long, loop+" to let go of "+image+" after the shutdown", func() bool { return loopOf(t, image) == "" })
	if _, err := os.Stat(image); !os.IsNotExist(err) {
		t.Fatalf("the disk's image is still there: %v", err)
	}
	// The project's cache is unmounted and kept for the next start.
	if got := mountsBelow(t, h.cfg.SandboxCacheDir()); len(got) != 0 {
		t.Fatalf("after the shutdown the caches' folder holds mounts %v", got)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.SandboxCacheDir(), "p"+itoa(id)+".img")); err != nil {
		t.Fatalf("the project's cache went with the shutdown: %v", err)
	}
	_, res := owner.run(base, "true", "")
	expectProblem(t, res, http.StatusServiceUnavailable, "server_stopping")
	if got := mountsBelow(t, top); len(got) != 0 {
		t.Fatalf("a command after the shutdown mounted %v", got)
	}

	cs, err := h.store.SessionByID(ctx, s.ID)
	if err != nil || cs.State != models.SessionOpen {
		t.Fatalf("the session after the shutdown: %+v, %v; want it open", cs, err)
	}
	files, err := h.store.SessionFiles(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	edits := map[string]string{}
	for _, f := range files {
		edits[f.Path] = string(f.Content)
	}
	if edits["src/main.go"] != "edited\n" || edits["made.txt"] != "made\n" {
		t.Fatalf("the session's edits after the shutdown: %q", edits)
	}

	two := newHarnessOn(t, h.store, nil, func(c *Config) {
		c.DataDir, c.WorkspacesRoot, c.SandboxArea = h.cfg.DataDir, h.cfg.WorkspacesRoot, h.cfg.SandboxArea
		c.Sandbox.UIDBase = h.cfg.Sandbox.UIDBase
	})
	again := two.signIn("owner")
	if s2, _ := again.session(id); s2.ID != s.ID {
		t.Fatalf("after the restart the open session is %s, want %s", s2.ID, s.ID)
	}
	if out := again.mustRun(base, "cat src/main.go made.txt ~/.cache/mark"); out.Stdout != "edited\nmade\nwarm\n" {
		t.Fatalf("a command after the restart saw %q", out.Stdout)
	}
	if got := mountsBelow(t, top); len(got) < 2 {
		t.Fatalf("the new server's command ran without the session's disk and overlay: %v", got)
	}
}

// mountsBelow lists the mount points at or below dir in this process's
// mount namespace.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Spaces and the like are octal escapes there.
		p, err := strconv.Unquote(`"` + strings.ReplaceAll(fields[4], `"`, `\"`) + `"`)
		if err != nil {
			p = fields[4]
		}
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// loopOf names the loop device whose backing file is image, "" when none.
func loopOf(t *testing.T, image string) string {
	t.Helper()
	loops, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range loops {
		b, err := os.ReadFile(filepath.Join(l, "loop", "backing_file"))
		if err != nil {
			continue // not attached
		}
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			return filepath.Base(l)
		}
	}
	return ""
}

// helperChildren counts the sandbox helpers this process started that
// still run: spares waiting for a command, or commands' inits.
func helperChildren(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 || fields[0] == "Z" || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == "atelier-sandbox-init" {
			n++
		}
	}
	return n
}

// TestStartUnmountsALeftOverlay: a server that was killed (no Close) with
// sessions' checkouts mounted, on hosts without session disks, leaves their
// overlays behind; the next server's start unmounts them before it serves,
// and the session's next command builds its checkout again.
func TestStartUnmountsALeftOverlay(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.SandboxDiskBytes = 0 })
	owner, id := editable(t, h)
	s, base := owner.session(id)
	owner.mustRun(base, "echo made > made.txt")
	checkout := hostCheckout(t, h, s.ID)
	if got := mountsBelow(t, checkout); len(got) != 1 {
		t.Fatalf("the checkout's mounts before: %v", got)
	}

	// A second server on the same data and database, as after a SIGKILL of
	// the first: it never closed anything.
	two := newHarnessOn(t, h.store, nil, func(c *Config) {
		c.DataDir, c.WorkspacesRoot, c.SandboxArea, c.SandboxDiskBytes = h.cfg.DataDir, h.cfg.WorkspacesRoot, h.cfg.SandboxArea, 0
		c.Sandbox.UIDBase = h.cfg.Sandbox.UIDBase
	})
	// What the start does before serving (run.go).
	if err := two.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := mountsBelow(t, checkout); len(got) != 0 {
		t.Fatalf("the new server's start left the killed one's overlay mounted: %v", got)
	}
	again := two.signIn("owner")
	if out := again.mustRun(base, "cat made.txt"); out.Stdout != "made\n" {
		t.Fatalf("a command after the restart saw %q", out.Stdout)
	}
}
