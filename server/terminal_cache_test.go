package server

import (
	"net/http"
	"net/url"
	"testing"

	"atelier/testrig/wait"
)

// signIn returns a client of h signed in as an existing user, as a person
// who reaches another instance of the same site.
func (h *harness) signIn(name string) *client {
	h.t.Helper()
	c := h.anonymous()
	res := c.post("/login", url.Values{"username": {name}, "password": {"password-" + name}})
	if res.StatusCode != http.StatusSeeOther {
		h.t.Fatalf("login %s: %d %s", name, res.StatusCode, readBody(res))
	}
	c.loadCSRF("/projects")
	return c
}

// TestTerminalRequestsSkipTheDatabase: once warm, a keystroke and a
// stream resume cost no query at all (sign-in, membership and the shell's
// owner all come from memory), yet a member removed or demoted (which ends
// their session), or a session ended, through this instance is refused on
// the very next request, with the cookie the person still holds.
func TestTerminalRequestsSkipTheDatabase(t *testing.T) {
	needRoot(t)
	terminalRequestsSkipTheDatabase(t, newHarness(t))
}

func TestTerminalRequestsSkipTheDatabaseInAPod(t *testing.T) {
	needRoot(t)
	terminalRequestsSkipTheDatabase(t, newHarness(t, onKube(t)))
}

func terminalRequestsSkipTheDatabase(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	dev := h.user("dev", false)
	owner.addMember(id, "dev", "admin")
	_, base := dev.session(id)
	term, res := dev.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open a terminal: %d %s", res.StatusCode, readBody(res))
	}
	stream := base + "/terminals/" + term.ID + "/stream"

	// Warm up: the first keystroke and stream read what they need.
	if res := dev.input(base, term.ID, 1, "echo warm-$((1+1))\r"); res.StatusCode != http.StatusOK {
		t.Fatalf("first key: %d %s", res.StatusCode, readBody(res))
	}
	_, last := dev.streamUntil(t, stream, "warm-2")

	sql := h.statements.RequestSQL()
	if res := dev.input(base, term.ID, 2, "echo hot-$((2+2))\r"); res.StatusCode != http.StatusOK {
		t.Fatalf("warm key: %d %s", res.StatusCode, readBody(res))
	}
	_, last = dev.streamUntil(t, stream+"?from="+last, "hot-4")
	if n := h.statements.RequestSQL() - sql; n != 0 {
		t.Errorf("a warm keystroke and stream resume cost %d queries, want 0", n)
	}

	// Demoted to a reader: the session ends with the right to edit
	// (revoked), and the next keystroke and stream hear it.
	owner.addMember(id, "dev", "member")
	expectProblem(t, dev.input(base, term.ID, 3, "x"), http.StatusGone, "revoked")
	expectProblem(t, dev.get(stream+"?from="+last, jsonAccept), http.StatusGone, "revoked")

	// Removed: the project is not theirs to see any more.
	owner.addMember(id, "dev", "admin")
	_, base = dev.session(id)
	if term, res = dev.openTerminal(base); res.StatusCode != http.StatusCreated {
		t.Fatalf("open a terminal after the role came back: %d %s", res.StatusCode, readBody(res))
	}
	stream = base + "/terminals/" + term.ID + "/stream"
	if res := dev.input(base, term.ID, 1, "y"); res.StatusCode != http.StatusOK {
		t.Fatalf("key after the role came back: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.del("/projects/"+itoa(id)+"/members/dev", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("remove dev: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, dev.input(base, term.ID, 2, "z"), http.StatusNotFound, "not_found")
	expectProblem(t, dev.get(stream+"?from="+last, jsonAccept), http.StatusNotFound, "not_found")

	// The owner's own session ends: its shell goes with it, and the next
	// keystroke or stream hears that the session is gone.
	_, own := owner.session(id)
	mine, res := owner.openTerminal(own)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open the owner's terminal: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.input(own, mine.ID, 1, "k"); res.StatusCode != http.StatusOK {
		t.Fatalf("owner's key: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.post(own+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("discard: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, owner.input(own, mine.ID, 2, "k"), http.StatusGone, "discarded")
	expectProblem(t, owner.get(own+"/terminals/"+mine.ID+"/stream", jsonAccept), http.StatusGone, "discarded")
}

// TestTerminalRevocationReachesAnotherInstance: another instance on the
// same database, which runs a person's shell and remembers their
// membership, refuses them as soon as they are removed through the first,
// with no clock moving; a session ended through the first loses its shell
// on the other at the next lease heartbeat.
func TestTerminalRevocationReachesAnotherInstance(t *testing.T) {
	needRoot(t)
	terminalRevocationReachesAnotherInstance(t)
}

func TestTerminalRevocationReachesAnotherInstanceInAPod(t *testing.T) {
	needRoot(t)
	terminalRevocationReachesAnotherInstance(t, onKube(t))
}

func terminalRevocationReachesAnotherInstance(t *testing.T, tweak ...func(*Config)) {
	one := newHarness(t, tweak...)
	// The same data folder too: the second instance reads the project's
	// repository as a deployment's shared storage would let it; and the
	// same cluster.
	two := newHarnessOn(t, one.store, nil, func(c *Config) {
		c.DataDir, c.WorkspacesRoot, c.SandboxArea = one.cfg.DataDir, one.cfg.WorkspacesRoot, one.cfg.SandboxArea
		c.Kube, c.kubeRig = one.cfg.Kube, one.cfg.kubeRig
	})
	owner, id := editable(t, one)
	devOnOne := one.user("dev", false)
	owner.addMember(id, "dev", "admin")
	dev := two.signIn("dev")
	shell := func() (string, termJSON) {
		t.Helper()
		_, base := dev.session(id)
		term, res := dev.openTerminal(base)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("open a terminal on the second instance: %d %s", res.StatusCode, readBody(res))
		}
		if res := dev.input(base, term.ID, 1, "echo there\r"); res.StatusCode != http.StatusOK {
			t.Fatalf("key: %d %s", res.StatusCode, readBody(res))
		}
		return base, term
	}

	base, term := shell()
	if res := devOnOne.post(base+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("discard through the first instance: %d %s", res.StatusCode, readBody(res))
	}
	two.app.Shells.Heartbeat(t.Context()) // what its next beat does, within workbench.LeaseEvery
	expectProblem(t, dev.input(base, term.ID, 2, "x"), http.StatusGone, "discarded")

	base, term = shell()
	if res := owner.del("/projects/"+itoa(id)+"/members/dev", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("remove dev: %d %s", res.StatusCode, readBody(res))
	}
	// No clock moves: the removal reaches the second instance over the bus,
	// not by RoleRecheck passing.
	seq := uint64(1)
	wait.For(t, wait.Short, "the second instance to forget the membership", func() bool {
		seq++
		res := dev.input(base, term.ID, seq, "x")
		res.Body.Close()
		return res.StatusCode != http.StatusOK
	})
	expectProblem(t, dev.input(base, term.ID, seq+1, "x"), http.StatusNotFound, "not_found")
	expectProblem(t, dev.get(base+"/terminals/"+term.ID+"/stream", jsonAccept), http.StatusNotFound, "not_found")
}
