package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atelier/models"
	"atelier/projects"
	"atelier/terminal"
	"atelier/testrig/wait"
	"atelier/workbench"
)

type termJSON struct {
	ID      string `json:"id"`
	NextSeq uint64 `json:"nextSeq"`
}

func (c *client) openTerminal(base string) (termJSON, *http.Response) {
	c.h.t.Helper()
	res := c.post(base+"/terminals", url.Values{"cols": {"100"}, "rows": {"30"}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		return termJSON{}, res
	}
	return decode[termJSON](c.h.t, res), res
}

func (c *client) input(base, tid string, seq uint64, data string) *http.Response {
	return c.do(http.MethodPost, base+"/terminals/"+tid+"/input", strings.NewReader(data),
		header{"X-CSRF-Token": c.csrf, "X-Input-Seq": strconv.FormatUint(seq, 10), "Accept": "application/json"})
}

// outputOf decodes the output a terminal's (or a command's) stream event
// carries: a text event's JSON string, an out event's base64; ok is false
// for any other event.
func outputOf(event, data string) (b []byte, ok bool, err error) {
	switch event {
	case "text":
		var s string
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			return nil, true, fmt.Errorf("text data %.40q: %w", data, err)
		}
		return []byte(s), true, nil
	case "out":
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, true, fmt.Errorf("out data is not base64: %w", err)
		}
		return b, true, nil
	}
	return nil, false, nil
}

// streamUntil reads the terminal's SSE stream until the decoded output
// contains want, and returns the output and the last event id.
func (c *client) streamUntil(t *testing.T, url, want string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.h.srv.URL+url, nil)
	res, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" || res.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("stream: %d %v", res.StatusCode, res.Header)
	}
	var out strings.Builder
	var lastID, event string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			lastID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			b, ok, err := outputOf(event, strings.TrimPrefix(line, "data: "))
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			out.Write(b)
			if strings.Contains(out.String(), want) {
				return out.String(), lastID
			}
		}
	}
	t.Fatalf("the stream ended without %q; got %q", want, out.String())
	return "", ""
}

func TestTerminalsOverHTTP(t *testing.T) {
	needRoot(t)
	terminalsOverHTTP(t, newHarness(t))
}

// The same in a pod, whose end goes with the session's.
func TestTerminalsOverHTTPInAPod(t *testing.T) {
	needRoot(t)
	h := newHarness(t, onKube(t))
	terminalsOverHTTP(t, h)
	waitNoPods(t, h)
}

func terminalsOverHTTP(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	other := h.user("other", false)
	owner.addMember(id, "other", "admin")
	_, base := owner.session(id)

	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated || !strings.HasPrefix(term.ID, "term_") || term.NextSeq != 1 {
		t.Fatalf("open: %d %+v", res.StatusCode, term)
	}
	// Input may arrive out of order; it is applied in order.
	for _, in := range []struct {
		seq  uint64
		data string
	}{{2, "cho hel"}, {1, "e"}, {3, "lo-$((6*7)) && stty size\r"}, {3, "DUPLICATE"}} {
		if res := owner.input(base, term.ID, in.seq, in.data); res.StatusCode != http.StatusOK {
			t.Fatalf("input %d: %d %s", in.seq, res.StatusCode, readBody(res))
		}
	}
	out, last := owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "30 100")
	if !strings.Contains(out, "hello-42") || strings.Contains(out, "DUPLICATE") {
		t.Fatalf("output %q", out)
	}
	// Resume from the last id: only what came after.
	if res := owner.post(base+"/terminals/"+term.ID+"/resize", url.Values{"cols": {"120"}, "rows": {"40"}}, header{"X-CSRF-Token": owner.csrf}); res.StatusCode != http.StatusNoContent {
		t.Fatalf("resize: %d", res.StatusCode)
	}
	owner.input(base, term.ID, 4, "stty size; id -u\r")
	after, _ := owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream?from="+last, "40 120")
	if strings.Contains(after, "hello-42") {
		t.Fatalf("resuming repeated old output: %q", after)
	}

	// The list lets a reloaded page reattach; nobody else sees the shell.
	list := decode[[]termJSON](t, owner.get(base+"/terminals", jsonAccept))
	if len(list) != 1 || list[0].ID != term.ID || list[0].NextSeq != 5 {
		t.Fatalf("list %+v", list)
	}
	for _, path := range []string{"/terminals", "/terminals/" + term.ID + "/stream"} {
		expectProblem(t, other.get(base+path, jsonAccept), http.StatusNotFound, "not_found")
	}
	expectProblem(t, other.input(base, term.ID, 5, "whoami\r"), http.StatusNotFound, "not_found")

	// Four shells per account; the fifth is refused and releases nothing it
	// did not take.
	var others []string
	for i := 0; i < 3; i++ {
		other, res := owner.openTerminal(base)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("shell %d: %d %s", i+2, res.StatusCode, readBody(res))
		}
		others = append(others, other.ID)
	}
	_, res = owner.openTerminal(base)
	expectProblem(t, res, http.StatusTooManyRequests, "account_shells")

	// DELETE kills the shell and what it started.
	owner.input(base, term.ID, 5, "sleep 999 & echo BG-$((2+3))\r")
	owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "BG-5") // the sleep has started
	wait.For(t, wait.Short, "the shell's job among the sandbox's processes", func() bool { return sandboxRuns(h, "sleep 999") })
	if res := owner.del(base+"/terminals/"+term.ID, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	wait.For(t, wait.Short, "the shell's job to end with it", func() bool { return !sandboxRuns(h, "sleep 999") })
	// The session's other shells live on. Not a wait: nothing is to
	// happen, and this is the time a wrongly ended shell would take to
	// show as gone.
	time.Sleep(300 * time.Millisecond)
	for _, other := range others {
		tm, err := h.app.Terminals.Get(other)
		if err != nil {
			t.Fatalf("closing one shell ended another (%s): %v", other, err)
		}
		if exit, ended := tm.ExitStatus(); ended {
			t.Fatalf("closing one shell ended another (%s): %+v", other, exit)
		}
	}
	if _, res := owner.openTerminal(base); res.StatusCode != http.StatusCreated {
		t.Fatalf("a closed shell did not give its slot back: %d %s", res.StatusCode, readBody(res))
	}

	// Ending the session ends its shells.
	owner.post(base+"/discard", nil, jsonAccept)
	wait.For(t, wait.Short, "the session's shells to end with it", func() bool {
		_, running := h.app.Terminals.Usage("")
		return running == 0
	})
}

// shellPid finds the pid of a terminal's shell.
func shellPid(t *testing.T, h *harness, id string) int {
	t.Helper()
	tm, err := h.app.Terminals.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(tm.Pid())); err != nil {
		t.Fatalf("no shell process: %v", err)
	}
	return tm.Pid()
}

// shellGone says whether the process of terminal id's shell has ended: in
// the jail by its pid, in a pod of the rig (a process of another host,
// were it a cluster) by every process of the harness's sandboxes gone.
func shellGone(t *testing.T, h *harness, id string) func() bool {
	t.Helper()
	if h.cfg.Kube != nil {
		wait.For(t, wait.Short, "the shell's process", func() bool { return len(sandboxProcesses(h)) > 0 })
		return func() bool { return len(sandboxProcesses(h)) == 0 }
	}
	pid := shellPid(t, h, id)
	return func() bool { return syscall.Kill(pid, 0) != nil }
}

// mustTerminal is a terminal this instance runs.
func mustTerminal(t *testing.T, h *harness, id string) *terminal.Terminal {
	t.Helper()
	tm, err := h.app.Terminals.Get(id)
	if err != nil {
		t.Fatalf("terminal %s: %v", id, err)
	}
	return tm
}

// waitClosed waits for a shell to end.
func waitClosed(t *testing.T, h *harness, id, why string) {
	t.Helper()
	tm, err := h.app.Terminals.Get(id)
	if err != nil {
		return // already gone
	}
	select {
	case <-tm.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the shell outlived %s", why)
	}
}

// A shell lives only while its lease, its owner's right to edit, its
// session and its project's sandbox time do; after a restart its viewers
// are told it exited.
func TestTerminalLifetime(t *testing.T) {
	needRoot(t)
	terminalLifetime(t, newHarness(t))
}

func TestTerminalLifetimeInAPod(t *testing.T) {
	needRoot(t)
	terminalLifetime(t, newHarness(t, onKube(t)))
}

func terminalLifetime(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	ctx := context.Background()

	// A live shell's lease is renewed.
	live, _ := owner.openTerminal(base)
	before, _ := h.store.TerminalByID(ctx, live.ID)
	h.clock.Advance(time.Second)
	h.app.Shells.Heartbeat(ctx)
	after, _ := h.store.TerminalByID(ctx, live.ID)
	if !after.HeartbeatAt.After(before.HeartbeatAt) || after.State != "live" {
		t.Fatalf("lease not renewed: %+v then %+v", before, after)
	}

	// Losing the lease (ended elsewhere) kills it.
	if err := h.store.EndTerminal(ctx, live.ID, "lost", h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.app.Shells.Heartbeat(ctx)
	waitClosed(t, h, live.ID, "its lease")

	// Losing the right to edit kills it, and so does an archive (which
	// pauses the session), when either is decided by another instance:
	// the heartbeat reads them from the database. (Through this one, a
	// demotion ends the session at once and its shells with it.)
	for _, change := range []struct{ why, do, undo string }{
		{"its owner's right to edit", "UPDATE project_members SET role = 'member' WHERE project_id = ?",
			"UPDATE project_members SET role = 'owner' WHERE project_id = ?"},
		{"the project's archive", "UPDATE projects SET status = 'archived', archived_at = now() WHERE id = ?",
			"UPDATE projects SET status = 'active', archived_at = NULL WHERE id = ?"},
	} {
		term, _ := owner.openTerminal(base)
		if err := h.store.Exec(ctx, change.do, id); err != nil {
			t.Fatal(err)
		}
		h.app.Shells.Heartbeat(ctx)
		waitClosed(t, h, term.ID, change.why)
		if err := h.store.Exec(ctx, change.undo, id); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(projects.RoleRecheck) // past what the instance remembers of the role
	}

	// Running out of sandbox time kills it, and new opens get 429.
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("reopen: %d %s", res.StatusCode, readBody(res))
	}
	if err := h.store.Exec(ctx, "UPDATE projects SET sandbox_monthly_seconds = 0 WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(5 * time.Minute) // the reservation no longer covers the shell
	owner.post(base+"/keepalive", nil, jsonAccept)
	h.app.Shells.Heartbeat(ctx)
	waitClosed(t, h, term.ID, "the month's sandbox time")
	_, res = owner.openTerminal(base)
	expectProblem(t, res, http.StatusTooManyRequests, "sandbox_cap")
	if err := h.store.Exec(ctx, "UPDATE projects SET sandbox_monthly_seconds = NULL WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}

	// Shells do not survive the server: a restarted server tells their
	// viewers they exited.
	term, _ = owner.openTerminal(base)
	restarted, err := New(ctx, h.cfg, h.store, h.app.log, h.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Bus.Close()
	defer restarted.Events.Close()
	h.app.Terminals.Close() // the old process goes, and its shells with it
	h.srv.Config.Handler = restarted.Handler
	body := readBody(owner.get(base+"/terminals/"+term.ID+"/stream", nil))
	if !strings.Contains(body, "event: exit") {
		t.Fatalf("a viewer of a shell of the previous process got %q", body)
	}
	if list := decode[[]termJSON](t, owner.get(base+"/terminals", jsonAccept)); len(list) != 0 {
		t.Fatalf("the restarted server lists %+v", list)
	}
	// A process that died without closing its shells leaves live leases
	// nobody renews: they are marked lost.
	crashed := &models.Terminal{ID: "term_" + strings.Repeat("0", 32), SessionID: s.ID, UserID: 1, Instance: "crashed",
		State: "live", OpenedAt: h.clock.Now(), HeartbeatAt: h.clock.Now()}
	if claimed, err := h.store.ClaimTerminal(ctx, crashed, 100, time.Time{}); err != nil || !claimed {
		t.Fatalf("the crashed process's lease: claimed %v, %v", claimed, err)
	}
	// It was being recorded, in the memory of the process that died.
	rec := &models.TerminalRecording{ProjectID: id, UserID: 1, SessionID: s.ID, TerminalID: crashed.ID, StartedAt: h.clock.Now()}
	if err := h.store.StartRecording(ctx, rec, workbench.MaxRecordings); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	restarted.Shells.Heartbeat(ctx)
	if lease, _ := h.store.TerminalByID(ctx, crashed.ID); lease.State != "lost" {
		t.Fatalf("the crashed process's lease is %q, want lost", lease.State)
	}
	if got, err := h.store.Recording(ctx, id, rec.ID); err != nil || got.State != models.RecordingFailed || got.EndedAt == nil {
		t.Fatalf("the lost terminal's recording: %+v, %v; want failed", got, err)
	}
}

// Four shells per account in all, whichever instances run them: with two
// instances on one database, two shells through each fill the account,
// the next through either is refused with account_shells, and a shell
// closed on one instance gives its place to the other.
func TestShellsPerAccountOnAllInstances(t *testing.T) {
	needRoot(t)
	shellsPerAccountOnAllInstances(t, newHarness(t))
}

func TestShellsPerAccountOnAllInstancesInAPod(t *testing.T) {
	needRoot(t)
	shellsPerAccountOnAllInstances(t, newHarness(t, onKube(t)))
}

func shellsPerAccountOnAllInstances(t *testing.T, h *harness) {
	ctx := context.Background()
	// The second instance starts before anything runs: what a start does
	// to another live instance's shells is not this test's matter.
	b, err := New(ctx, h.cfg, h.store, h.app.log, h.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	srvB := httptest.NewUnstartedServer(b.Handler)
	srvB.Config.ConnContext = connContext
	srvB.Start()
	t.Cleanup(srvB.Close)
	t.Cleanup(b.Events.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("closing the second instance: %v", err)
		}
	})

	owner, p1 := editable(t, h)
	p2 := owner.createProject("second")
	if res := owner.upload(p2, "base.tar.gz", tarGz(t, []entry{{name: "README.md", body: "# Second\n"}}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	// The same person, the same cookies, through the other instance.
	hb := *h
	hb.srv, hb.app = srvB, b
	throughB := *owner
	throughB.h = &hb
	_, baseA := owner.session(p1)
	_, baseB := throughB.session(p2)

	var onA []string
	for i := range 2 {
		term, res := owner.openTerminal(baseA)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("shell %d through the first instance: %d %s", i+1, res.StatusCode, readBody(res))
		}
		onA = append(onA, term.ID)
		if _, res := throughB.openTerminal(baseB); res.StatusCode != http.StatusCreated {
			t.Fatalf("shell %d through the second instance: %d %s", i+1, res.StatusCode, readBody(res))
		}
	}
	_, res := owner.openTerminal(baseA)
	expectProblem(t, res, http.StatusTooManyRequests, "account_shells")
	_, res = throughB.openTerminal(baseB)
	expectProblem(t, res, http.StatusTooManyRequests, "account_shells")

	if res := owner.del(baseA+"/terminals/"+onA[0], jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("close: %d", res.StatusCode)
	}
	wait.ForNil(t, wait.Long, "the closed shell's lease to end", func() error {
		lease, err := h.store.TerminalByID(ctx, onA[0])
		if err != nil {
			return err
		}
		if lease.State == models.TerminalLive {
			return errors.New("still live")
		}
		return nil
	})
	if _, res := throughB.openTerminal(baseB); res.StatusCode != http.StatusCreated {
		t.Fatalf("a place freed on one instance, taken through the other: %d %s", res.StatusCode, readBody(res))
	}
	_, res = owner.openTerminal(baseA)
	expectProblem(t, res, http.StatusTooManyRequests, "account_shells")
}

// A shell opened the moment the session's last one closed lives: the
// capture after that last shell, which ends every process of the
// session, waits for a shell that is starting as for one that runs.
func TestAShellOpenedAsTheLastClosesLives(t *testing.T) {
	needRoot(t)
	aShellOpenedAsTheLastClosesLives(t, newHarness(t))
}

func TestAShellOpenedAsTheLastClosesLivesInAPod(t *testing.T) {
	needRoot(t)
	aShellOpenedAsTheLastClosesLives(t, newHarness(t, onKube(t)))
}

func aShellOpenedAsTheLastClosesLives(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	for i := range 8 {
		if res := owner.do(http.MethodDelete, base+"/terminals/"+term.ID, nil, header{"X-CSRF-Token": owner.csrf}); res.StatusCode >= 300 {
			t.Fatalf("close: %d %s", res.StatusCode, readBody(res))
		}
		term, res = owner.openTerminal(base)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("round %d: the shell opened as the last closed: %d %s", i, res.StatusCode, readBody(res))
		}
		marker := fmt.Sprintf("ALIVE-%d-$((40+2))", i)
		owner.input(base, term.ID, 1, "echo "+marker+"\r")
		owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", fmt.Sprintf("ALIVE-%d-42", i))
	}
}
