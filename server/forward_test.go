package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/instances"
	"atelier/testrig/wait"
)

// clusterOf runs two instances on one database and data folder, sharing a
// secret; a has taken the session's runtime by running its first command.
func clusterOf(t *testing.T, tweak ...func(*Config)) (a, b *harness, owner *client, sessionID, base string) {
	t.Helper()
	secret := func(c *Config) { c.ClusterSecret = strings.Repeat("k", 32) }
	a = newHarness(t, append(tweak, secret)...)
	if err := a.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	owner, id := editable(t, a)
	s, base := owner.session(id)
	owner.mustRun(base, "echo made > made.txt")
	b = newHarnessOn(t, a.store, nil, secret, func(c *Config) {
		c.DataDir, c.WorkspacesRoot = a.cfg.DataDir, a.cfg.WorkspacesRoot
		c.Kube, c.kubeRig = a.cfg.Kube, a.cfg.kubeRig // one cluster
	})
	if err := b.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a, b, owner, s.ID, base
}

// Through either instance, a session's commands and shells run on the one
// that holds it: a command sent to the other runs there and answers here,
// a thousand keystrokes sent to both in turn reach the shell once each and
// in order, its stream resumed through the other goes on from the exact
// byte, the terminal list is the same, and a cancel through the other
// stops the holder's command at once.
func TestRequestsReachTheSessionsHolder(t *testing.T) {
	needRoot(t)
	requestsReachTheSessionsHolder(t)
}

func TestRequestsReachTheSessionsHolderInAPod(t *testing.T) {
	needRoot(t)
	requestsReachTheSessionsHolder(t, onKube(t))
}

func requestsReachTheSessionsHolder(t *testing.T, tweak ...func(*Config)) {
	a, b, viaA, sessionID, base := clusterOf(t, tweak...)
	viaB := b.signIn("owner")

	if out := viaB.mustRun(base, "cat made.txt; echo via-b > b.txt"); out.Stdout != "made\n" {
		t.Fatalf("a command through the other instance saw %q", out.Stdout)
	}
	if _, err := os.Stat(filepath.Join(hostCheckout(t, a, sessionID), "b.txt")); err != nil {
		t.Fatalf("the command through b did not run in a's checkout: %v", err)
	}
	if _, err := os.Stat(filepath.Join(b.cfg.SandboxDir(), sessionID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b built a checkout of a session a holds: %v", err)
	}

	term, res := viaB.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("a terminal through b: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := a.app.Terminals.Get(term.ID); err != nil {
		t.Fatalf("the shell opened through b does not run on a: %v", err)
	}
	// A thousand keystrokes, alternating between the instances: the line
	// echoed back is every one of them once and in order. Its numbers
	// never repeat a run, so a key lost, doubled or swapped shows.
	var line strings.Builder
	for i := 0; line.Len() < 980; i++ {
		fmt.Fprintf(&line, "%d.", i)
	}
	typed := "echo " + line.String()[:980] + "-$((6*7))\r"
	if n := len(typed); n < 990 || n > 1000 {
		t.Fatalf("typed %d keys", n)
	}
	seq := term.NextSeq
	for i, key := range strings.Split(typed, "") {
		via := viaA
		if i%2 == 1 {
			via = viaB
		}
		if res := via.input(base, term.ID, seq, key); res.StatusCode >= 300 {
			t.Fatalf("keystroke %d through %s: %d %s", i, map[bool]string{true: "b", false: "a"}[i%2 == 1], res.StatusCode, readBody(res))
		}
		seq++
	}
	want := line.String()[:980] + "-42"
	stream := base + "/terminals/" + term.ID + "/stream"
	throughA, _ := viaA.streamUntil(t, stream, want)
	throughA = throughA[:strings.Index(throughA, want)+len(want)]
	// Resumed through b from a byte a read through a passed, the stream
	// goes on from exactly that byte.
	from := len(throughA) / 4
	throughB, _ := viaB.streamUntil(t, stream+"?from="+strconv.Itoa(from), want)
	if throughB = throughB[:strings.Index(throughB, want)+len(want)]; throughB != throughA[from:] {
		t.Fatalf("resumed through b at byte %d, the stream read %q\nwhere a read %q", from, throughB, throughA[from:])
	}

	for _, via := range []*client{viaA, viaB} {
		var list []termJSON
		if err := json.Unmarshal([]byte(readBody(via.get(base+"/terminals", jsonAccept))), &list); err != nil || len(list) != 1 || list[0].ID != term.ID {
			t.Fatalf("the terminal list through %p: %+v %v", via, list, err)
		}
	}

	answer := make(chan commandJSON, 1)
	go func() {
		out, _ := viaA.run(base, "sleep 60; echo never", "")
		answer <- out
	}()
	// Running, not only holding its slot: a command still setting up its
	// sandbox has nothing to cancel yet.
	wait.For(t, wait.Long, "the long command to run on a", func() bool { return len(a.app.Runtime.RunningCommands()) == 1 })
	cancelled := time.Now()
	if res := viaB.post(base+"/commands/cancel", nil, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("cancel through b: %d %s", res.StatusCode, readBody(res))
	}
	select {
	case out := <-answer:
		if strings.Contains(out.Stdout, "never") {
			t.Fatalf("the cancelled command ran on: %+v", out)
		}
		t.Logf("a command on a answered %v after its cancel through b", time.Since(cancelled).Round(time.Millisecond))
	case <-time.After(wait.Long.Duration()):
		t.Fatalf("the command cancelled through b still ran after %s", wait.Long.Duration())
	}
}

// Two commands of one session sent at once, one through each instance, run
// one after the other on the holder: neither starts before the other ends,
// so neither's capture can overwrite the other's edits.
func TestOneSessionsCommandsNeverOverlapAcrossInstances(t *testing.T) {
	needRoot(t)
	oneSessionsCommandsNeverOverlapAcrossInstances(t)
}

func TestOneSessionsCommandsNeverOverlapAcrossInstancesInAPod(t *testing.T) {
	needRoot(t)
	oneSessionsCommandsNeverOverlapAcrossInstances(t, onKube(t))
}

func oneSessionsCommandsNeverOverlapAcrossInstances(t *testing.T, tweak ...func(*Config)) {
	a, b, viaA, _, base := clusterOf(t, tweak...)
	viaB := b.signIn("owner")
	type span struct{ start, end float64 }
	spans := make(chan span, 2)
	errs := make(chan error, 2)
	for name, via := range map[string]*client{"a": viaA, "b": viaB} {
		go func() {
			out, res := via.run(base, "date +%s.%N; sleep 0.5; echo "+name+" >> both.txt; date +%s.%N", "")
			if res.StatusCode != http.StatusOK || out.ExitCode != 0 {
				errs <- fmt.Errorf("the command through %s: %d %+v", name, res.StatusCode, out)
				return
			}
			var s span
			if _, err := fmt.Sscan(out.Stdout, &s.start, &s.end); err != nil {
				errs <- fmt.Errorf("the command through %s printed %q: %v", name, out.Stdout, err)
				return
			}
			spans <- s
		}()
	}
	var got []span
	for len(got) < 2 {
		select {
		case s := <-spans:
			got = append(got, s)
		case err := <-errs:
			t.Fatal(err)
		}
	}
	if first, second := got[0], got[1]; first.start < second.end && second.start < first.end {
		t.Fatalf("the two commands ran at once: %+v and %+v", first, second)
	}
	if out := viaA.mustRun(base, "sort both.txt | tr -d '\\n'"); out.Stdout != "ab" {
		t.Fatalf("both commands' edits: %q", out.Stdout)
	}
	if a.app.Runtime.CommandsHeld() != 0 || b.app.Runtime.CommandsHeld() != 0 {
		t.Fatal("a command is still held")
	}
}

// A request handed on carries the cluster's mark; one that claims to come
// from another instance without it is handed on like any other, so a
// client cannot make an instance serve a session it does not hold.
func TestAForgedForwardMarkIsNotBelieved(t *testing.T) {
	needRoot(t)
	_, b, _, _, base := clusterOf(t)
	viaB := b.signIn("owner")
	forged := instances.SignForward([]byte(strings.Repeat("x", 32)), "a", http.MethodPost, base+"/commands", b.clock.Now())
	res := viaB.post(base+"/commands", map[string][]string{"command": {"cat made.txt"}}, header{"Accept": "application/json", instances.ForwardHeader: forged})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a command with a forged mark: %d %s (it was not handed to the holder)", res.StatusCode, readBody(res))
	}
}

// A session discarded through the instance that does not run it ends on
// the one that does, by word of the bus: its shell closes and its checkout
// goes, with nothing handed on.
func TestASessionEndedElsewhereEndsWhereItRuns(t *testing.T) {
	needRoot(t)
	aSessionEndedElsewhereEndsWhereItRuns(t)
}

func TestASessionEndedElsewhereEndsWhereItRunsInAPod(t *testing.T) {
	needRoot(t)
	aSessionEndedElsewhereEndsWhereItRuns(t, onKube(t))
}

func aSessionEndedElsewhereEndsWhereItRuns(t *testing.T, tweak ...func(*Config)) {
	a, b, viaA, sessionID, base := clusterOf(t, tweak...)
	term, res := viaA.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := a.app.Terminals.Get(term.ID); err != nil {
		t.Fatalf("the shell does not run on a: %v", err)
	}
	if !slices.Contains(a.app.Runtime.HeldSessions(), sessionID) {
		t.Fatal("a holds no checkout of the session; the test needs one")
	}
	b.signIn("owner").discard(base)
	waitClosed(t, a, term.ID, "the shell of a session discarded through b")
	wait.For(t, wait.Short, "a to let the session's checkout go", func() bool {
		return !slices.Contains(a.app.Runtime.HeldSessions(), sessionID)
	})
}

// An instance declared gone while it still ran a session's command (a
// stall, say) does not overwrite what the instance that took the session
// since captured: its command's capture is refused and its checkout goes.
// Once it finds itself declared gone, it ends its shells.
func TestAnInstanceDeclaredGoneLetsItsSessionsGo(t *testing.T) {
	needRoot(t)
	anInstanceDeclaredGoneLetsItsSessionsGo(t)
}

func TestAnInstanceDeclaredGoneLetsItsSessionsGoInAPod(t *testing.T) {
	needRoot(t)
	anInstanceDeclaredGoneLetsItsSessionsGo(t, onKube(t))
}

func anInstanceDeclaredGoneLetsItsSessionsGo(t *testing.T, tweak ...func(*Config)) {
	a, b, viaA, sessionID, base := clusterOf(t, tweak...)
	viaB := b.signIn("owner")
	term, res := viaA.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	mustTerminal(t, a, term.ID)
	answer := make(chan *http.Response, 1)
	go func() {
		_, res := viaA.run(base, "sleep 2; echo late > late.txt", "")
		answer <- res
	}()
	// Running, not only holding its slot: a command still setting up its
	// sandbox has nothing to cancel yet.
	wait.For(t, wait.Long, "the long command to run on a", func() bool { return len(a.app.Runtime.RunningCommands()) == 1 })

	// What another instance's beat does to one whose heartbeat is late.
	ctx := t.Context()
	if err := a.store.Exec(ctx, "UPDATE instances SET stopped_at = now() WHERE id = ?", a.app.Instance); err != nil {
		t.Fatal(err)
	}
	if err := a.store.Exec(ctx, "UPDATE code_sessions SET runtime_instance = NULL WHERE runtime_instance = ?", a.app.Instance); err != nil {
		t.Fatal(err)
	}
	viaB.mustRun(base, "echo b > b.txt")
	if !slices.Contains(b.app.Runtime.HeldSessions(), sessionID) {
		t.Fatal("b did not take the session a was declared gone from")
	}
	expectProblem(t, <-answer, http.StatusConflict, "session_elsewhere")
	if out := viaB.mustRun(base, "ls"); !strings.Contains(out.Stdout, "b.txt") || strings.Contains(out.Stdout, "late.txt") {
		t.Fatalf("the session's files after the late capture: %q", out.Stdout)
	}
	if slices.Contains(a.app.Runtime.HeldSessions(), sessionID) {
		t.Fatal("a kept its stale checkout of the session")
	}

	a.app.Instances.Beat(ctx)
	waitClosed(t, a, term.ID, "a's finding it was declared gone")
	if held := a.app.Runtime.HeldSessions(); len(held) != 0 {
		t.Fatalf("a still holds %v after it was revived", held)
	}
	if a.cfg.Kube != nil && podFolder(t, a, sessionID) == "" {
		t.Fatal("a, letting its sessions go, deleted the pod b runs the session in")
	}
	if out := viaB.mustRun(base, "cat b.txt"); out.Stdout != "b\n" {
		t.Fatalf("b's session after a let it go: %+v", out)
	}
}
