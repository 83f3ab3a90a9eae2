package server

import (
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/meter"
	"atelier/sandbox"
	"atelier/testrig/wait"

	"k8s.io/client-go/rest"
)

// processesWith lists the pids of live processes whose command line holds
// want, read on the host.
func processesWith(want string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if strings.Contains(string(cmdline), want) && !strings.Contains(string(stat), ") Z ") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Two people's sessions on one project, seen from the second one's
// commands: nothing of the first's processes, /tmp or checkout, nothing of
// the server's folders; a named user and the host's Go. The data dir is
// 0700 all the way and the database is outside it, as with DATABASE_URL.
func TestSandboxJailOverHTTP(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	for d := h.cfg.DataDir; d != filepath.Dir(os.TempDir()); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || (d != os.TempDir() && fi.Mode().Perm() != 0o700) {
			t.Fatalf("%s: %v %v; want 0700 folders up to the temporary dir", d, fi.Mode(), err)
		}
	}
	a, id := editable(t, h)
	b := h.user("other", false)
	a.addMember(id, "other", "admin")
	sa, baseA := a.session(id)
	_, baseB := b.session(id)
	if fi, err := os.Stat(h.cfg.WorkspacesRoot); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("workspaces root: %v %v; want 0700", fi.Mode(), err)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	var outA commandJSON
	go func() {
		defer wg.Done()
		res := a.post(baseA+"/commands", map[string][]string{"command": {`echo a > /tmp/a-file; (exec -a "worker --token=sk-SECRET-A" sleep 4)`}}, jsonAccept)
		if res.StatusCode == 200 {
			outA = decode[commandJSON](t, res)
		}
	}()
	if !wait.Until(wait.Long, func() bool { return len(processesWith("sk-SECRET-A")) > 0 }) {
		t.Fatal("a's command did not start")
	}
	out, res := b.run(baseB, "ps -eo args; ls -A /tmp", "")
	if res.StatusCode != 200 || out.ExitCode != 0 {
		t.Fatalf("b's ps: %d %+v", res.StatusCode, out)
	}
	if strings.Contains(out.Stdout, "SECRET") || strings.Contains(out.Stdout, "a-file") {
		t.Errorf("b sees a's command or /tmp:\n%s", out.Stdout)
	}
	wg.Wait()
	if outA.ExitCode != 0 {
		t.Fatalf("a's command: %+v", outA)
	}

	checkoutA := hostCheckout(t, h, sa.ID)
	local := t.TempDir() // stands for a Local project's folder
	for _, path := range []string{h.cfg.DataDir, h.cfg.WorkspacesRoot, checkoutA, local, "/root", "/srv", "/var"} {
		out, _ := b.run(baseB, "ls "+path, "")
		if out.ExitCode == 0 || !strings.Contains(out.Stderr, "No such file") {
			t.Errorf("b lists %s: %+v", path, out)
		}
	}
	want := []string{"dev", "home", "proc", "tmp", "workspace"}
	for _, p := range sandbox.DefaultROPaths {
		if _, err := os.Lstat(p); err == nil {
			want = append(want, strings.TrimPrefix(p, "/"))
		}
	}
	slices.Sort(want)
	out, _ = b.run(baseB, "ls -A /; id -un", "")
	if got := strings.Fields(out.Stdout); !slices.Equal(got, append(want, "atelier")) {
		t.Errorf("ls / and id -un: %q, want %q and atelier", got, want)
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		if out, _ := b.run(baseB, "go version", ""); !strings.HasPrefix(out.Stdout, "go version go") {
			t.Errorf("go version: %+v", out)
		}
		if page := readBody(b.get(baseB, header{})); !strings.Contains(page, `placeholder="go test ./..."`) {
			t.Error("the command box does not suggest go test although Go is there")
		}
	}
}

// A terminal's background job lives through a one-shot command of the same
// session that kills everything it can; ending the session ends both.
func TestTerminalOutlivesACommand(t *testing.T) {
	needRoot(t)
	terminalOutlivesACommand(t, newHarness(t))
}

// In a pod the shells have a container of their own, whose processes a
// command's container cannot see; the command's answer comes from its
// container's main process, which its kill -9 -1 cannot reach.
func TestTerminalOutlivesACommandInAPod(t *testing.T) {
	needRoot(t)
	terminalOutlivesACommand(t, newHarness(t, onKube(t)))
}

func terminalOutlivesACommand(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != 201 {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	// A duration no other test uses: processes are counted host-wide, and
	// test binaries of other packages run at the same time.
	owner.input(base, term.ID, 1, "sleep 4711 & echo BG-$((1+1))\r")
	_, last := owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "BG-2")
	if !wait.Until(wait.Short, func() bool { return len(processesWith("sleep\x004711")) == 1 }) {
		t.Fatal("the terminal's sleep did not start")
	}
	// It goes on after: a pod's runtime holds the exec stream open while
	// the container's main process writes the answer.
	if out, res := owner.run(base, "kill -9 -1; sleep 2.5; echo done", ""); res.StatusCode != 200 || out.Stdout != "done\n" || out.ExitCode != 0 {
		t.Fatalf("command: %d %+v", res.StatusCode, out)
	}
	// Not a wait: nothing is to happen, and this is the time a wrongly
	// killed sleep would take to show as gone.
	time.Sleep(200 * time.Millisecond)
	if len(processesWith("sleep\x004711")) != 1 {
		t.Fatal("the one-shot command ended the terminal's sleep")
	}
	owner.input(base, term.ID, 2, "echo ALIVE-$((40+2))\r")
	owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream?from="+last, "ALIVE-42")

	owner.post(base+"/discard", nil, jsonAccept)
	if !wait.Until(wait.Long, func() bool { return len(processesWith("sleep\x004711")) == 0 }) {
		t.Error("the terminal's sleep outlived the session")
	}
	waitClosed(t, h, term.ID, "the session's end")
}

// A cluster whose exec cannot be reached keeps the server serving, as a
// host without a jail does: commands and terminals answer 503
// cluster_unreachable, never 500, nothing is metered, and editing goes on.
func TestClusterUnreachableIs503InAPod(t *testing.T) {
	needRoot(t)
	h := newHarness(t, onKube(t), func(c *Config) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.kubeRig.rest = &rest.Config{Host: "http://" + l.Addr().String()}
		l.Close() // nothing listens there now
	})
	owner, id := editable(t, h)
	_, base := owner.session(id)
	_, res := owner.run(base, "true", "")
	expectProblem(t, res, http.StatusServiceUnavailable, "cluster_unreachable")
	_, res = owner.openTerminal(base)
	expectProblem(t, res, http.StatusServiceUnavailable, "cluster_unreachable")
	// A command's reservation is let go off the answer's path.
	var usage meter.Usage
	wait.For(t, wait.Long, "the reservations to be let go", func() bool {
		usage, _ = h.app.Meter.Usage(t.Context(), id)
		return usage.Reserved == 0
	})
	if usage.Used != 0 {
		t.Errorf("a refused command or shell was charged: %+v", usage)
	}
	if res := owner.put(base, "still.txt", []byte("editing works\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("editing without a cluster: %d", res.StatusCode)
	}
}

// A host where the jail cannot be built (here: a read-only path that
// cannot be opened) keeps serving: commands and terminals answer 503
// sandbox_unavailable, never 500, and editing goes on.
func TestSandboxUnavailableIs503(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.Sandbox.ROPaths = []string{"/usr", "/etc/hostname/not-a-folder"} })
	if !errors.Is(h.app.Sandbox.Unavailable(), sandbox.ErrUnavailable) {
		t.Fatalf("Unavailable() = %v", h.app.Sandbox.Unavailable())
	}
	owner, id := editable(t, h)
	s, base := owner.session(id)
	_, res := owner.run(base, "true", "")
	expectProblem(t, res, http.StatusServiceUnavailable, "sandbox_unavailable")
	_, res = owner.openTerminal(base)
	expectProblem(t, res, http.StatusServiceUnavailable, "sandbox_unavailable")
	// Refused before anything was made or reserved for them.
	if _, err := os.Stat(filepath.Join(h.cfg.SandboxDir(), s.ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused command still built the session's checkout: %v", err)
	}
	if usage, err := h.app.Meter.Usage(t.Context(), id); err != nil || usage.Reserved != 0 || usage.Used != 0 {
		t.Errorf("a refused command or shell was metered: %+v %v", usage, err)
	}
	if res := owner.put(base, "still.txt", []byte("editing works\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("editing without a sandbox: %d", res.StatusCode)
	}
}
