package server

import (
	"atelier/testrig/wait"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// Two instances on one database and one data folder, each with its own
// sandbox area and uids. The second one's start settles nothing and kills
// nothing of the first one's: its live shell, its reservation and the
// session's disk stay. A session's commands run only on the instance that
// holds it; once that one stops, the other takes the session over and
// finds its edits.
func TestASecondInstanceLeavesTheFirstsWorkAlone(t *testing.T) {
	needRoot(t)
	secondInstanceLeavesTheFirstsWorkAlone(t)
}

// In a pod, the second instance's start ends the leftover processes of
// the sessions no live instance holds, and deletes their pods: none of the
// first one's.
func TestASecondInstanceLeavesTheFirstsWorkAloneInAPod(t *testing.T) {
	needRoot(t)
	secondInstanceLeavesTheFirstsWorkAlone(t, onKube(t))
}

func secondInstanceLeavesTheFirstsWorkAlone(t *testing.T, tweak ...func(*Config)) {
	a := newHarness(t, tweak...)
	if err := a.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	owner, id := editable(t, a)
	s, base := owner.session(id)
	owner.mustRun(base, "echo made > made.txt")
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	owner.input(base, term.ID, term.NextSeq, "sleep 997 & echo JOB-$((6*7))\r")
	owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "JOB-42")
	wait.For(t, wait.Short, "the shell's job to run", func() bool { return sandboxRuns(a, "sleep 997") })
	onDisk := a.cfg.Kube == nil // a pod's disk is the cluster's
	image := filepath.Join(a.cfg.SandboxDiskDir(), s.ID+".img")
	if onDisk && loopOf(t, image) == "" {
		t.Fatal("no loop device holds the session's disk; the test needs one")
	}
	held, err := a.app.Meter.Usage(t.Context(), id)
	if err != nil || held.Reserved == 0 {
		t.Fatalf("the live shell holds no reservation: %+v %v", held, err)
	}

	b := newHarnessOn(t, a.store, nil, func(c *Config) {
		c.DataDir, c.WorkspacesRoot = a.cfg.DataDir, a.cfg.WorkspacesRoot
		c.Kube, c.kubeRig = a.cfg.Kube, a.cfg.kubeRig // one cluster
	})
	if b.cfg.SandboxArea == a.cfg.SandboxArea || b.cfg.Sandbox.UIDBase == a.cfg.Sandbox.UIDBase {
		t.Fatal("the two instances share a sandbox area or uids; the test needs them apart")
	}
	if err := b.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Not a wait: nothing is to happen, and this is the time a wrongly
	// ended shell would take to show as gone.
	time.Sleep(300 * time.Millisecond)
	if !sandboxRuns(a, "sleep 997") {
		t.Fatal("the second instance's start killed what the first one's shell started")
	}
	if _, ended := mustTerminal(t, a, term.ID).ExitStatus(); ended {
		t.Fatal("the second instance's start ended the first one's shell")
	}
	if onDisk && loopOf(t, image) == "" {
		t.Fatal("the second instance's start took the first one's session disk away")
	}
	if now, err := a.app.Meter.Usage(t.Context(), id); err != nil || now.Reserved != held.Reserved || now.Used != held.Used {
		t.Fatalf("the second instance's start settled the first one's reservation: %+v, was %+v (%v)", now, held, err)
	}

	viaB := b.signIn("owner")
	_, res = viaB.run(base, "cat made.txt", "")
	expectProblem(t, res, http.StatusConflict, "session_elsewhere")

	if err := a.app.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := viaB.mustRun(base, "cat made.txt"); out.Stdout != "made\n" {
		t.Fatalf("on the second instance the session's command saw %q", out.Stdout)
	}
}

// What a running shell writes joins the session's edits at the next
// periodic capture, while the shell goes on: an instance that dies loses
// at most what its shells wrote since.
func TestRunningShellsAreCaptured(t *testing.T) {
	needRoot(t)
	runningShellsAreCaptured(t, newHarness(t))
}

func TestRunningShellsAreCapturedInAPod(t *testing.T) {
	needRoot(t)
	runningShellsAreCaptured(t, newHarness(t, onKube(t)))
}

func runningShellsAreCaptured(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	owner.input(base, term.ID, term.NextSeq, "echo from-the-shell > shell.txt; echo WROTE-$((6*7))\r")
	owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "WROTE-42")
	if _, _, status := owner.read(base, "shell.txt"); status != http.StatusNotFound {
		t.Fatalf("before any capture the shell's file reads %d; the test needs it unrecorded", status)
	}
	h.app.Runtime.CaptureShells(t.Context())
	if got, _, status := owner.read(base, "shell.txt"); status != http.StatusOK || string(got) != "from-the-shell\n" {
		t.Fatalf("after the periodic capture the shell's file reads %d %q", status, got)
	}
	if _, err := h.app.Terminals.Get(term.ID); err != nil {
		t.Fatalf("the capture ended the shell: %v", err)
	}
}
