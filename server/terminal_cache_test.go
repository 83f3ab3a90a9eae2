package server

import (
	"net/http"
	"net/url"
	"testing"

	"atelier/projects"
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
// owner all come from memory), yet a member removed or demoted, or a
// session ended, through this instance is refused on the very next request,
// with the cookie the person still holds.
func TestTerminalRequestsSkipTheDatabase(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
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

	sql := h.statements.SQL()
	if res := dev.input(base, term.ID, 2, "echo hot-$((2+2))\r"); res.StatusCode != http.StatusOK {
		t.Fatalf("warm key: %d %s", res.StatusCode, readBody(res))
	}
	_, last = dev.streamUntil(t, stream+"?from="+last, "hot-4")
	if n := h.statements.SQL() - sql; n != 0 {
		t.Errorf("a warm keystroke and stream resume cost %d queries, want 0", n)
	}

	// Demoted to a reader: the next keystroke and stream are refused.
	owner.addMember(id, "dev", "member")
	expectProblem(t, dev.input(base, term.ID, 3, "x"), http.StatusForbidden, "forbidden")
	expectProblem(t, dev.get(stream+"?from="+last, jsonAccept), http.StatusForbidden, "forbidden")

	// Removed: the project is not theirs to see any more.
	owner.addMember(id, "dev", "admin")
	if res := dev.input(base, term.ID, 3, "y"); res.StatusCode != http.StatusOK {
		t.Fatalf("key after the role came back: %d %s", res.StatusCode, readBody(res))
	}
	if res := owner.del("/projects/"+itoa(id)+"/members/dev", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("remove dev: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, dev.input(base, term.ID, 4, "z"), http.StatusNotFound, "not_found")
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
// membership, refuses them once projects.RoleRecheck has passed on its
// clock after they were removed through the first; a session ended through
// the first loses its shell on the other at the next lease heartbeat.
func TestTerminalRevocationReachesAnotherInstance(t *testing.T) {
	needRoot(t)
	one := newHarness(t)
	// The same data folder too: the second instance reads the project's
	// repository as a deployment's shared storage would let it.
	two := newHarnessOn(t, one.store, nil, func(c *Config) {
		c.DataDir, c.WorkspacesRoot = one.cfg.DataDir, one.cfg.WorkspacesRoot
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
	two.app.Shells.Heartbeat(t.Context()) // what its next beat does, within editsession.LeaseEvery
	expectProblem(t, dev.input(base, term.ID, 2, "x"), http.StatusGone, "discarded")

	base, term = shell()
	if res := owner.del("/projects/"+itoa(id)+"/members/dev", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("remove dev: %d %s", res.StatusCode, readBody(res))
	}
	two.clock.Advance(projects.RoleRecheck)
	expectProblem(t, dev.input(base, term.ID, 2, "x"), http.StatusNotFound, "not_found")
	expectProblem(t, dev.get(base+"/terminals/"+term.ID+"/stream", jsonAccept), http.StatusNotFound, "not_found")
}
