package server

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/meter"
	"atelier/models"
	"atelier/testrig/wait"
)

type commandJSON struct {
	ExitCode        int      `json:"exitCode"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutTruncated bool     `json:"stdoutTruncated"`
	StderrTruncated bool     `json:"stderrTruncated"`
	DurationMS      int64    `json:"durationMs"`
	Notes           []string `json:"notes"`
}

func (c *client) run(base, command, folder string) (commandJSON, *http.Response) {
	c.h.t.Helper()
	res := c.post(base+"/commands", url.Values{"command": {command}, "folder": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		return commandJSON{}, res
	}
	return decode[commandJSON](c.h.t, res), res
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("precondition: sandboxed commands switch users, which needs root (CI runs as root)")
	}
}

// workspace is where sessions' commands see their checkout.
func (h *harness) workspace() string {
	if h.cfg.Kube != nil {
		return h.cfg.Kube.Workspace
	}
	return "/workspace"
}

// hostCheckout is the session's checkout as the host sees it: what its
// commands see as /workspace.
func hostCheckout(t *testing.T, h *harness, sessionID string) string {
	t.Helper()
	if h.cfg.Kube != nil {
		return podCheckout(t, h, sessionID)
	}
	found, _ := filepath.Glob(filepath.Join(h.cfg.SandboxDir(), sessionID, "checkout"))
	if len(found) != 1 {
		t.Fatalf("the checkout of %s on the host: %q", sessionID, found)
	}
	return found[0]
}

// preparedCheckout is hostCheckout once the session has one; a pod's is
// "" before it is made.
func preparedCheckout(t *testing.T, h *harness, sessionID string) string {
	t.Helper()
	if h.cfg.Kube != nil {
		return podFolder(t, h, sessionID)
	}
	return filepath.Join(h.cfg.SandboxDir(), sessionID, "checkout")
}

// Opening a session prepares its sandbox before any command: the
// checkout (or the pod), with the session's files, is there, unmetered,
// and the first command runs in it.
func TestOpeningPreparesTheSandbox(t *testing.T) {
	needRoot(t)
	openingPreparesTheSandbox(t, newHarness(t))
}

func TestOpeningPreparesTheSandboxInAPod(t *testing.T) {
	needRoot(t)
	openingPreparesTheSandbox(t, newHarness(t, onKube(t)))
}

func openingPreparesTheSandbox(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	// The checkout is written while it is watched (a file exists before
	// its content does), so wait for the content itself.
	var readme []byte
	if !wait.Until(wait.Long, func() bool {
		found := preparedCheckout(t, h, s.ID)
		if found == "" {
			return false
		}
		readme, _ = os.ReadFile(filepath.Join(found, "README.md"))
		return string(readme) == "# Base\n"
	}) {
		t.Fatalf("no checkout with the session's files after opening it; README.md: %q", readme)
	}
	usage, err := h.app.Meter.Usage(context.Background(), id)
	if err != nil || usage.Used != 0 || usage.Reserved != 0 {
		t.Fatalf("preparing was metered: %+v %v", usage, err)
	}
	if out, _ := owner.run(base, "cat README.md", ""); out.Stdout != "# Base\n" {
		t.Fatalf("the first command: %+v", out)
	}
}

func TestCommandsBecomeEdits(t *testing.T) {
	needRoot(t)
	commandsBecomeEdits(t, newHarness(t))
}

// The same in a pod: the kube provider's helper runs each command and
// finds what it changed, against the manifest of what it unpacked.
func TestCommandsBecomeEditsInAPod(t *testing.T) {
	needRoot(t)
	commandsBecomeEdits(t, newHarness(t, onKube(t)))
}

func commandsBecomeEdits(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	// An edit saved in the editor is in the checkout.
	owner.put(base, "from-editor.txt", []byte("typed\n"), nil)

	out, res := owner.run(base, "cat from-editor.txt; pwd; id -u; echo oops >&2; exit 3", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", res.StatusCode, readBody(res))
	}
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if out.ExitCode != 3 || len(lines) != 3 || lines[0] != "typed" || lines[1] != h.workspace() || out.Stderr != "oops\n" {
		t.Fatalf("result %+v", out)
	}
	uid, _ := strconv.ParseUint(lines[2], 10, 32)
	if uid < uint64(h.cfg.Sandbox.UIDBase) || uid >= uint64(h.cfg.Sandbox.UIDBase)+uint64(h.cfg.Sandbox.UIDCount) {
		t.Fatalf("ran as uid %d, outside the session range", uid)
	}

	// What the command changes becomes edits; what cannot, stays out with a note.
	out, _ = owner.run(base, `echo new > added.txt
echo changed > README.md
rm src/old.txt
head -c 300000 /dev/zero | tr '\0' a > big.txt
printf 'a\0b' > bin.dat
mkdir -p deep/er && printf 'no newline' > deep/er/f.txt
ln -s README.md link`, "")
	if out.ExitCode != 0 {
		t.Fatalf("second command %+v", out)
	}
	changes := map[string]string{}
	for _, c := range decode[[]editsession.Change](t, owner.get(base+"/changes", jsonAccept)) {
		changes[c.Path] = c.Status
	}
	want := map[string]string{"from-editor.txt": "added", "added.txt": "added", "README.md": "modified", "src/old.txt": "deleted", "deep/er/f.txt": "added"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for p, st := range want {
		if changes[p] != st {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
	notes := strings.Join(out.Notes, "\n")
	for _, left := range []string{"big.txt", "bin.dat", "link"} {
		if !strings.Contains(notes, left) || !strings.Contains(out.Stderr, left) {
			t.Fatalf("no note for %s: notes %q stderr %q", left, out.Notes, out.Stderr)
		}
	}
	if got, _, _ := owner.read(base, "deep/er/f.txt"); got != "no newline" {
		t.Fatalf("captured bytes %q", got)
	}
	// Undoing a change in a command forgets the edit.
	owner.run(base, "echo '# Base' > README.md", "")
	for _, c := range decode[[]editsession.Change](t, owner.get(base+"/changes", jsonAccept)) {
		if c.Path == "README.md" {
			t.Fatal("README.md is back to the base but still an edit")
		}
	}

	// The audit has the commands, never their output; the history waits
	// for the rows written after the answers.
	owner.get(base+"/commands", jsonAccept).Body.Close()
	cmds, err := h.store.SessionCommands(context.Background(), s.ID, 10)
	if err != nil || len(cmds) != 3 || cmds[2].ExitCode != 3 || !strings.Contains(cmds[2].Command, "cat from-editor.txt") {
		t.Fatalf("audit %+v %v", cmds, err)
	}

	// A folder runs the command there; a bad folder is refused.
	if out, _ := owner.run(base, "pwd", "src"); !strings.HasSuffix(strings.TrimSpace(out.Stdout), "/src") {
		t.Fatalf("folder: %+v", out)
	}
	if _, res := owner.run(base, "pwd", "../.."); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad folder: %d", res.StatusCode)
	}
}

// The session's user reaches nothing of the server: not its data, not its
// port, not the other session's checkout.
func TestCommandsAreConfined(t *testing.T) {
	needRoot(t)
	commandsAreConfined(t, newHarness(t))
}

// The same in a pod, where the other session's checkout is another pod's
// folder and PID 1 the container's main process. A pod's network is its
// NetworkPolicy's, which the rig (on the host's network) does not enforce:
// the policy objects' tests and kube_e2e check it instead.
func TestCommandsAreConfinedInAPod(t *testing.T) {
	needRoot(t)
	commandsAreConfined(t, newHarness(t, onKube(t)))
}

func commandsAreConfined(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	other := h.user("other", false)
	owner.addMember(id, "other", "admin")
	_, base := owner.session(id)
	t2, _ := other.openSession(id)
	otherBase := "/projects/" + itoa(id) + "/sessions/" + t2.ID
	other.run(otherBase, "echo secret > mine.txt", "")

	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.srv.URL, "http://"))
	reachServer := "(exec 3<>/dev/tcp/127.0.0.1/" + port + ") 2>/dev/null && echo SERVER-REACHED"
	otherCheckout := filepath.Join(h.cfg.SandboxDir(), t2.ID, "checkout")
	if h.cfg.Kube != nil {
		otherCheckout, reachServer = podCheckout(t, h, t2.ID), ""
	}
	if got, err := os.ReadFile(filepath.Join(otherCheckout, "mine.txt")); string(got) != "secret\n" {
		t.Fatalf("the other session's file: %q %v", got, err)
	}
	script := strings.Join([]string{
		"env | sort",
		"ls " + h.cfg.DataDir + " && echo DATA-LISTED",
		"cat " + filepath.Join(otherCheckout, "mine.txt") + " && echo OTHER-READ",
		reachServer,
		"cat /proc/1/environ >/dev/null && echo PID1-READ",
		"true",
	}, "\n")
	out, res := owner.run(base, script, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("run: %d %s", res.StatusCode, readBody(res))
	}
	for _, leak := range []string{"DATA-LISTED", "OTHER-READ", "SERVER-REACHED", "PID1-READ", "DATABASE_URL", "ATELIER"} {
		if strings.Contains(out.Stdout, leak) {
			t.Fatalf("%s:\n%s", leak, out.Stdout)
		}
	}
	envLines := strings.Split(strings.TrimSpace(strings.Split(out.Stdout, "\n"+"ls")[0]), "\n")
	for _, l := range envLines {
		name, _, _ := strings.Cut(l, "=")
		switch name {
		case "HOME", "LANG", "PATH", "TERM", "PWD", "SHLVL", "_",
			"XDG_CACHE_HOME", "GOCACHE", "GOMODCACHE", "npm_config_cache", "PIP_CACHE_DIR": // the project's cache
		default:
			if strings.Contains(l, "=") {
				t.Fatalf("unexpected variable %q in %q", l, out.Stdout)
			}
		}
	}
}

// The meter: a command is refused at the cap with 429 sandbox_cap, while
// editing goes on; a run is charged its time plus the tail.
func TestCommandsAreMetered(t *testing.T) {
	needRoot(t)
	commandsAreMetered(t, newHarness(t))
}

// The same in a pod: the meter sees a pod's command as the jail's.
func TestCommandsAreMeteredInAPod(t *testing.T) {
	needRoot(t)
	commandsAreMetered(t, newHarness(t, onKube(t)))
}

func commandsAreMetered(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	if out, _ := owner.run(base, "true", ""); out.ExitCode != 0 {
		t.Fatal("first command failed")
	}
	hist := decode[struct {
		Commands []models.SessionCommand
		Usage    struct{ Used, Reserved, Cap int64 }
	}](t, owner.get(base+"/commands", jsonAccept))
	if hist.Usage.Used < 120 || hist.Usage.Used > 130 || hist.Usage.Reserved != 0 || hist.Usage.Cap != h.cfg.SandboxCap || len(hist.Commands) != 1 {
		t.Fatalf("after one quick command: %+v", hist)
	}
	// Cap the project at what it used: the next command is refused.
	if err := h.store.Exec(context.Background(), "UPDATE projects SET sandbox_monthly_seconds = ? WHERE id = ?", hist.Usage.Used+20, id); err != nil {
		t.Fatal(err)
	}
	_, res := owner.run(base, "true", "")
	expectProblem(t, res, http.StatusTooManyRequests, "sandbox_cap")
	if res := owner.put(base, "still.txt", []byte("editing works\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("editing at the cap: %d", res.StatusCode)
	}
	page := readBody(owner.get(base+"/commands", header{"HX-Request": "true"}))
	if !strings.Contains(page, `class="meter warn"`) {
		t.Fatalf("no warning near the cap:\n%s", page)
	}
}

// TestTheAnswerDoesNotWaitForTheMeter: a command is answered before its
// sandbox time is settled (a transaction of several statements), while the
// history, which shows the project's usage, waits for the settling: the
// page never reads a reservation its command no longer holds. The
// project's next command waits for it only when the month, with what the
// earlier command still holds, has no room: it is then weighed against
// what that command used.
func TestTheAnswerDoesNotWaitForTheMeter(t *testing.T) {
	needRoot(t)
	answerDoesNotWaitForTheMeter(t, newHarness(t))
}

func TestTheAnswerDoesNotWaitForTheMeterInAPod(t *testing.T) {
	needRoot(t)
	answerDoesNotWaitForTheMeter(t, newHarness(t, onKube(t)))
}

func answerDoesNotWaitForTheMeter(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	type history struct {
		Commands []models.SessionCommand
		Usage    struct{ Used, Reserved int64 }
	}
	if out, _ := owner.run(base, "true", ""); out.ExitCode != 0 {
		t.Fatal("first command failed")
	}
	if hist := decode[history](t, owner.get(base+"/commands", jsonAccept)); hist.Usage.Reserved != 0 || hist.Usage.Used == 0 {
		t.Fatalf("after the first command: %+v", hist)
	}
	answeredAtOnce := func(command string) {
		t.Helper()
		answered := make(chan commandJSON, 1)
		go func() {
			out, _ := owner.run(base, command, "")
			answered <- out
		}()
		select {
		case out := <-answered:
			if out.ExitCode != 0 {
				t.Fatalf("%s: %+v", command, out)
			}
		case <-time.After(wait.Short.Duration()):
			t.Fatalf("%s waited for the meter's settling", command)
		}
	}

	// Four settlings may be under way (workbench's settlingsUnderWay);
	// the next command waits for them, so they never pile up.
	release := holdPaidTail(t, h, id)
	for i := range 4 {
		answeredAtOnce("echo the month has room " + strconv.Itoa(i))
	}
	fifth := make(chan *http.Response, 1)
	go func() {
		_, res := owner.run(base, "echo fifth", "")
		fifth <- res
	}()
	listed := make(chan *http.Response, 1)
	go func() { listed <- owner.get(base+"/commands", jsonAccept) }()
	select {
	case res := <-fifth:
		t.Fatalf("a fifth command was answered with four settlings under way: %d %s", res.StatusCode, readBody(res))
	case res := <-listed:
		t.Fatalf("the history answered before the commands' time was settled: %d %s", res.StatusCode, readBody(res))
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if res := <-fifth; res.StatusCode != http.StatusOK {
		t.Fatalf("the fifth command once the settlings ended: %d %s", res.StatusCode, readBody(res))
	}
	if hist := decode[history](t, <-listed); hist.Usage.Used == 0 || len(hist.Commands) < 5 {
		t.Fatalf("the history after the settlings: %+v", hist)
	}
	hist := decode[history](t, owner.get(base+"/commands", jsonAccept))
	if hist.Usage.Reserved != 0 || len(hist.Commands) != 6 {
		t.Fatalf("the history after the fifth command: %+v", hist)
	}

	// A month with room for one more command once the earlier one is
	// settled, not while it holds its reservation: the next command
	// waits for that settling, and runs.
	release = holdPaidTail(t, h, id)
	answeredAtOnce("echo held")
	if err := h.store.Exec(context.Background(), "UPDATE projects SET sandbox_monthly_seconds = ? WHERE id = ?", hist.Usage.Used+meter.Chunk+300, id); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		_, res := owner.run(base, "echo weighed", "")
		answered <- res
	}()
	select {
	case res := <-answered:
		t.Fatalf("the command at the cap was answered before the one before it was settled: %d %s", res.StatusCode, readBody(res))
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if res := <-answered; res.StatusCode != http.StatusOK {
		t.Fatalf("the command at the cap after the settling: %d %s", res.StatusCode, readBody(res))
	}
}

// holdPaidTail holds the project's row of its paid tail, which a settling
// writes and nothing before it on a command's way does, until release.
func holdPaidTail(t *testing.T, h *harness, project int64) (release func()) {
	t.Helper()
	return holdInTx(t, h.store, `SELECT project_id FROM sandbox_awake WHERE project_id = ? FOR UPDATE`, project)
}

// holdInTx runs lock in a transaction of its own and holds what it locked
// until release (or the test's end).
func holdInTx(t *testing.T, store *models.Store, lock string, args ...any) (release func()) {
	t.Helper()
	locked, done := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- store.Tx(context.Background(), func(tx *models.Store) error {
			if err := tx.Exec(context.Background(), lock, args...); err != nil {
				return err
			}
			close(locked)
			<-done
			return nil
		})
	}()
	release = sync.OnceFunc(func() {
		close(done)
		if err := <-held; err != nil {
			t.Errorf("holding %q: %v", lock, err)
		}
	})
	t.Cleanup(release)
	select {
	case <-locked:
	case err := <-held:
		held <- err // for release
		t.Fatalf("holding %q: %v", lock, err)
	}
	return release
}

// TestTheAnswerDoesNotWaitForItsAuditRow: a command is answered before its
// audit row is written, while the session's history waits for the row,
// read through either instance: the page that reloads its history on the
// answer always finds the command there.
func TestTheAnswerDoesNotWaitForItsAuditRow(t *testing.T) {
	needRoot(t)
	a, b, viaA, _, base := clusterOf(t)
	viaB := b.signIn("owner")
	type history struct{ Commands []models.SessionCommand }
	if hist := decode[history](t, viaB.get(base+"/commands", jsonAccept)); len(hist.Commands) != 1 {
		t.Fatalf("before: %+v", hist)
	}

	// Inserts into the audit wait while the test holds the table; reads
	// do not.
	release := holdInTx(t, a.store, `LOCK TABLE code_session_commands IN SHARE MODE`)
	answered := make(chan commandJSON, 1)
	go func() {
		out, _ := viaA.run(base, "echo answered", "")
		answered <- out
	}()
	select {
	case out := <-answered:
		if out.Stdout != "answered\n" {
			t.Fatalf("the command: %+v", out)
		}
	case <-time.After(wait.Short.Duration()):
		t.Fatal("the answer waited for the audit row")
	}
	listed := make(chan *http.Response, 1)
	go func() { listed <- viaB.get(base+"/commands", jsonAccept) }()
	select {
	case res := <-listed:
		t.Fatalf("the history through the other instance answered before the audit row was written: %d %s", res.StatusCode, readBody(res))
	case <-time.After(300 * time.Millisecond):
	}
	release()
	hist := decode[history](t, <-listed)
	if len(hist.Commands) != 2 || hist.Commands[0].Command != "echo answered" {
		t.Fatalf("the history after the audit row: %+v", hist)
	}
	// Rows keep the commands' order, each written after its answer.
	for i := range 5 {
		viaA.mustRun(base, "echo "+strconv.Itoa(i))
	}
	hist = decode[history](t, viaA.get(base+"/commands", jsonAccept))
	for i, c := range hist.Commands[:5] {
		if want := "echo " + strconv.Itoa(4-i); c.Command != want {
			t.Fatalf("row %d of the history is %q, want %q: %+v", i, c.Command, want, hist.Commands)
		}
	}
}

// Ending a session kills its processes and removes its checkout, home and
// /tmp.
func TestEndingRemovesTheSandbox(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, id := editable(t, h)
	s, base := owner.session(id)
	if out, _ := owner.run(base, "pwd; echo left > /tmp/left-behind", ""); out.Stdout != "/workspace\n" {
		t.Fatalf("pwd: %+v", out)
	}
	checkout := hostCheckout(t, h, s.ID)
	home := filepath.Join(filepath.Dir(checkout), "home")
	tmpFile := filepath.Join(filepath.Dir(checkout), "tmp", "left-behind")
	if _, err := os.Stat(tmpFile); err != nil {
		t.Fatalf("the command's /tmp file is not in the session's /tmp: %v", err)
	}
	if _, err := os.Stat(home); err != nil {
		t.Fatalf("the session's home: %v", err)
	}
	fi, _ := os.Stat(checkout)
	if st, ok := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o700 || !ok || st.Uid < h.cfg.Sandbox.UIDBase {
		t.Fatalf("checkout mode %v, owner %v: want 0700, the session's user", fi.Mode(), fi.Sys())
	}
	// Idle for two minutes, the checkout goes; the next command rebuilds it
	// with the session's edits.
	owner.put(base, "kept.txt", []byte("kept\n"), nil)
	h.clock.Advance(2*time.Minute + time.Second)
	h.app.Runtime.DropIdleCheckouts(context.Background())
	if _, err := os.Stat(checkout); !os.IsNotExist(err) {
		t.Fatalf("an idle checkout survived: %v", err)
	}
	if out, _ := owner.run(base, "cat kept.txt", ""); out.Stdout != "kept\n" {
		t.Fatalf("rebuilt checkout: %+v", out)
	}
	owner.post(base+"/discard", nil, jsonAccept)
	// The session's folder holds its checkout, home and /tmp.
	for _, dir := range []string{checkout, home, tmpFile, filepath.Dir(checkout)} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s survived the end: %v", dir, err)
		}
	}
}

// In a pod, ending a session deletes its pod, and so does an idle
// checkout's drop; the next command makes the pod again with the
// session's edits.
func TestEndingDeletesThePod(t *testing.T) {
	needRoot(t)
	h := newHarness(t, onKube(t))
	owner, id := editable(t, h)
	s, base := owner.session(id)
	if out, _ := owner.run(base, "pwd; echo left > ~/left-behind", ""); out.Stdout != h.cfg.Kube.Workspace+"\n" {
		t.Fatalf("pwd: %+v", out)
	}
	hostCheckout(t, h, s.ID) // the session has a pod
	owner.put(base, "kept.txt", []byte("kept\n"), nil)
	h.clock.Advance(2*time.Minute + time.Second)
	h.app.Runtime.DropIdleCheckouts(context.Background())
	waitNoPods(t, h)
	if out, _ := owner.run(base, "cat kept.txt", ""); out.Stdout != "kept\n" {
		t.Fatalf("the checkout made again: %+v", out)
	}
	hostCheckout(t, h, s.ID)
	owner.post(base+"/discard", nil, jsonAccept)
	waitNoPods(t, h)
}

// The project's network policy: deny (the default) keeps commands off the
// host's ports, and so does allow, which gives them a network of their own
// with a way out (sandbox/egress_test.go tests where it leads); members
// cannot change it.
func TestSandboxNetworkPolicy(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, id := editable(t, h)
	member := h.user("member", false)
	owner.addMember(id, "member", "member")
	_, base := owner.session(id)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.srv.URL, "http://"))
	probe := "(exec 3<>/dev/tcp/127.0.0.1/" + port + ") 2>/dev/null && echo REACHED || echo CUT-OFF; grep -q tap0: /proc/net/dev && echo WAY-OUT || echo LO-ONLY"

	if out, _ := owner.run(base, probe, ""); strings.TrimSpace(out.Stdout) != "CUT-OFF\nLO-ONLY" {
		t.Fatalf("deny: %+v", out)
	}
	expectProblem(t, member.post("/projects/"+itoa(id)+"/sandbox-network", url.Values{"network": {"allow"}}, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, owner.post("/projects/"+itoa(id)+"/sandbox-network", url.Values{"network": {"open"}}, jsonAccept), http.StatusBadRequest, "bad_network")
	if res := owner.post("/projects/"+itoa(id)+"/sandbox-network", url.Values{"network": {"allow"}}, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("allow: %d", res.StatusCode)
	}
	// The open session picks the policy up at its next command.
	if out, res := owner.run(base, probe, ""); strings.TrimSpace(out.Stdout) != "CUT-OFF\nWAY-OUT" {
		t.Fatalf("allow: %d %+v", res.StatusCode, out)
	}
}

// Without the network stack, a project whose network is allowed gets 503
// network_unavailable, and its command does not run on the host's network
// instead.
func TestSandboxNetworkAllowUnavailable(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.Sandbox.NetStack = "/nonexistent/slirp4netns" })
	owner, id := editable(t, h)
	_, base := owner.session(id)
	if res := owner.post("/projects/"+itoa(id)+"/sandbox-network", url.Values{"network": {"allow"}}, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("allow: %d", res.StatusCode)
	}
	_, res := owner.run(base, "touch ran", "")
	expectProblem(t, res, http.StatusServiceUnavailable, "network_unavailable")
	owner.post("/projects/"+itoa(id)+"/sandbox-network", url.Values{"network": {"deny"}}, jsonAccept)
	if out, _ := owner.run(base, "test -e ran && echo RAN || echo NOT-RAN", ""); strings.TrimSpace(out.Stdout) != "NOT-RAN" {
		t.Errorf("the refused command ran: %+v", out)
	}
}

// Folders the editor creates in a live checkout belong to the session's
// user, so the person's own commands can write in them; a saved script
// keeps its executable bit.
func TestEditorSavesBelongToTheSessionUser(t *testing.T) {
	needRoot(t)
	editorSavesBelongToTheSessionUser(t, newHarness(t))
}

func TestEditorSavesBelongToTheSessionUserInAPod(t *testing.T) {
	needRoot(t)
	editorSavesBelongToTheSessionUser(t, newHarness(t, onKube(t)))
}

func editorSavesBelongToTheSessionUser(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	// The first command builds the checkout; saves after it land in it.
	if out, _ := owner.run(base, "printf '#!/bin/sh\\necho one\\n' > run.sh && chmod +x run.sh", ""); out.ExitCode != 0 {
		t.Fatalf("first command %+v", out)
	}
	if res := owner.put(base, "newdir/sub/x.txt", []byte("typed\n"), nil); res.StatusCode >= 300 {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	_, etag, _ := owner.read(base, "run.sh")
	if res := owner.put(base, "run.sh", []byte("#!/bin/sh\necho two\n"), header{"If-Match": etag}); res.StatusCode >= 300 {
		t.Fatalf("save run.sh: %d %s", res.StatusCode, readBody(res))
	}
	out, _ := owner.run(base, "touch newdir/y newdir/sub/z && cat newdir/sub/x.txt && ./run.sh && stat -c '%a %u' newdir newdir/sub newdir/sub/x.txt && id -u", "")
	if out.ExitCode != 0 {
		t.Fatalf("the session's user cannot write where the editor saved: %+v", out)
	}
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if len(lines) != 6 || lines[0] != "typed" || lines[1] != "two" {
		t.Fatalf("output %q", out.Stdout)
	}
	uid := lines[5]
	for i, want := range []string{"755 " + uid, "755 " + uid, "644 " + uid} {
		if lines[2+i] != want {
			t.Fatalf("mode and owner %q, want %q (output %q)", lines[2+i], want, out.Stdout)
		}
	}
}

func TestSandboxAllowCIDRsConfig(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "ATELIER_SANDBOX_ALLOW_CIDRS" {
				return v
			}
			return ""
		}
	}
	cfg, err := LoadConfig(env("10.1.2.3/16, fd00::/8"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range cfg.Sandbox.AllowNetworks {
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != "10.1.0.0/16 fd00::/8" {
		t.Errorf("networks %v", got)
	}
	if _, err := LoadConfig(env("169.254.169.254")); err == nil || !strings.Contains(err.Error(), "ATELIER_SANDBOX_ALLOW_CIDRS") {
		t.Errorf("a bare address: %v", err)
	}
}
