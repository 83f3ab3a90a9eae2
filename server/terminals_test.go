package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atelier/models"
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
		case strings.HasPrefix(line, "data: ") && event == "out":
			b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(line, "data: "))
			if err != nil {
				t.Fatalf("out data is not base64: %v", err)
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
	h := newHarness(t)
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
	pid := shellPid(t, h, term.ID)
	owner.input(base, term.ID, 5, "sleep 999 &\r")
	time.Sleep(200 * time.Millisecond)
	if res := owner.del(base+"/terminals/"+term.ID, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", res.StatusCode)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("the shell (pid %d) survived DELETE", pid)
	}
	// The session's other shells live on.
	time.Sleep(300 * time.Millisecond)
	for _, other := range others {
		if tm, err := h.app.Terminals.Get(other); err != nil || syscall.Kill(tm.Pid(), 0) != nil {
			t.Fatalf("closing one shell ended another (%s): %v", other, err)
		}
	}
	if _, res := owner.openTerminal(base); res.StatusCode != http.StatusCreated {
		t.Fatalf("a closed shell did not give its slot back: %d %s", res.StatusCode, readBody(res))
	}

	// Ending the session ends its shells.
	owner.post(base+"/discard", nil, jsonAccept)
	deadline := time.Now().Add(5 * time.Second)
	for ; ; time.Sleep(50 * time.Millisecond) {
		if _, running := h.app.Terminals.Usage(""); running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("shells outlived their session")
		}
	}
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
	h := newHarness(t)
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

	// Losing the right to edit kills it: demote the owner... by adding a
	// second owner who demotes the first.
	term, _ := owner.openTerminal(base)
	boss := h.user("boss", false)
	owner.post("/projects/"+itoa(id)+"/members", url.Values{"username": {"boss"}, "role": {"owner"}}, jsonAccept)
	boss.loadCSRF("/projects")
	if res := boss.post("/projects/"+itoa(id)+"/members", url.Values{"username": {"owner"}, "role": {"member"}}, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("demote: %d %s", res.StatusCode, readBody(res))
	}
	h.app.Shells.Heartbeat(ctx)
	waitClosed(t, h, term.ID, "its owner's right to edit")
	owner.post("/projects/"+itoa(id)+"/members", url.Values{"username": {"owner"}, "role": {"owner"}}, jsonAccept)
	boss.post("/projects/"+itoa(id)+"/members", url.Values{"username": {"owner"}, "role": {"owner"}}, jsonAccept)

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
	if err := h.store.CreateTerminal(ctx, crashed); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	restarted.Shells.Heartbeat(ctx)
	if lease, _ := h.store.TerminalByID(ctx, crashed.ID); lease.State != "lost" {
		t.Fatalf("the crashed process's lease is %q, want lost", lease.State)
	}
}
