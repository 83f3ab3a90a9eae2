package server

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atelier/instances"
	"atelier/testrig/wait"
)

// clusterOf runs two instances on one database and data folder, sharing a
// secret; a has taken the session's runtime by running its first command.
func clusterOf(t *testing.T) (a, b *harness, owner *client, sessionID, base string) {
	t.Helper()
	secret := func(c *Config) { c.ClusterSecret = strings.Repeat("k", 32) }
	a = newHarness(t, secret)
	if err := a.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	owner, id := editable(t, a)
	s, base := owner.session(id)
	owner.mustRun(base, "echo made > made.txt")
	b = newHarnessOn(t, a.store, nil, secret, func(c *Config) { c.DataDir, c.WorkspacesRoot = a.cfg.DataDir, a.cfg.WorkspacesRoot })
	if err := b.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a, b, owner, s.ID, base
}

// Through either instance, a session's commands and shells run on the one
// that holds it: a command sent to the other runs there and answers here,
// keystrokes sent to both in turn reach the shell once each and in order,
// its stream reads the same through both, the terminal list is the same,
// and a cancel through the other stops the holder's command.
func TestRequestsReachTheSessionsHolder(t *testing.T) {
	needRoot(t)
	a, b, viaA, sessionID, base := clusterOf(t)
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
	typed := "echo ordered-" + strings.Repeat("x", 20) + "-$((6*7))\r"
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
	want := "ordered-" + strings.Repeat("x", 20) + "-42"
	viaB.streamUntil(t, base+"/terminals/"+term.ID+"/stream", want)
	viaA.streamUntil(t, base+"/terminals/"+term.ID+"/stream", want)

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
	wait.For(t, wait.Long, "the long command to run on a", func() bool { return a.app.Runtime.CommandsHeld() == 1 })
	if res := viaB.post(base+"/commands/cancel", nil, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("cancel through b: %d %s", res.StatusCode, readBody(res))
	}
	select {
	case out := <-answer:
		if strings.Contains(out.Stdout, "never") {
			t.Fatalf("the cancelled command ran on: %+v", out)
		}
	case <-t.Context().Done():
		t.Fatal("the command cancelled through b never ended")
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
