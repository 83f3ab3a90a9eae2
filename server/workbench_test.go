package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/models"
	"atelier/testrig/wait"
	"atelier/workbench"
)

// runInBackground starts a command, as JSON or as the command box's htmx
// request, and delivers its answer on the channel.
func (c *client) runInBackground(base, command string, htmx bool) <-chan commandAnswer {
	done := make(chan commandAnswer, 1)
	form := url.Values{"command": {command}, "csrf_token": {c.csrf}}
	req, err := http.NewRequest(http.MethodPost, c.h.srv.URL+base+"/commands", strings.NewReader(form.Encode()))
	if err != nil {
		c.h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if htmx {
		req.Header.Set("HX-Request", "true")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	go func() {
		res, err := c.http.Do(req)
		if err != nil {
			done <- commandAnswer{err: err}
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var out commandJSON
		var canceled struct {
			Canceled bool `json:"canceled"`
		}
		if htmx {
			canceled.Canceled = strings.Contains(string(body), `data-canceled="true"`) && strings.Contains(string(body), "cancelled")
		} else {
			json.Unmarshal(body, &out)
			json.Unmarshal(body, &canceled)
		}
		done <- commandAnswer{status: res.StatusCode, result: out, canceled: canceled.Canceled, body: string(body)}
	}()
	return done
}

type commandAnswer struct {
	status   int
	result   commandJSON
	canceled bool
	body     string
	err      error
}

// waitRunning waits until the session has a command running on the instance.
func waitRunning(t *testing.T, h *harness, sessionID string) {
	t.Helper()
	wait.For(t, wait.Long, "a command of "+sessionID+" to start", func() bool {
		return slices.ContainsFunc(h.app.Runtime.RunningCommands(), func(c workbench.RunningCommand) bool { return c.SessionID == sessionID })
	})
}

// The owner stops a long command; its answer says it was cancelled and
// keeps what it wrote and changed. Another user cannot stop it, and a
// request without the CSRF token is refused.
func TestCancelCommand(t *testing.T) {
	needRoot(t)
	cancelCommand(t, newHarness(t))
}

func TestCancelCommandInAPod(t *testing.T) {
	needRoot(t)
	cancelCommand(t, newHarness(t, onKube(t)))
}

func cancelCommand(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	other := h.user("other", false)
	s, base := owner.session(id)

	// Nothing runs yet.
	expectProblem(t, owner.post(base+"/commands/cancel", nil, jsonAccept), http.StatusConflict, "no_running_command")

	began := time.Now()
	answer := owner.runInBackground(base, "echo partial > wrote.txt; echo started; sleep 30; echo never", false)
	waitRunning(t, h, s.ID)

	// Someone else's request finds no such session, and stops nothing.
	expectProblem(t, other.post(base+"/commands/cancel", nil, jsonAccept), http.StatusNotFound, "not_found")
	// The owner's browser without the token (a cross-site form) is refused.
	expectProblem(t, owner.postRaw(base+"/commands/cancel", url.Values{}, jsonAccept), http.StatusForbidden, "csrf")
	// It is cancelled once it has written (its output says so), so the
	// answer has something to keep: the first command also builds the
	// checkout, which on a loaded machine takes longer than any fixed
	// pause.
	wait.For(t, wait.Long, "the command to write", func() bool {
		select {
		case a := <-answer:
			t.Fatalf("the command ended before its owner cancelled it: %+v", a)
		default:
		}
		out, err := h.app.Runtime.CommandOutput(&editsession.Session{CodeSession: &models.CodeSession{ID: s.ID}})
		return err == nil && out.Offset() > 0
	})

	res := owner.post(base+"/commands/cancel", nil, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d %s", res.StatusCode, readBody(res))
	}
	if got := decode[map[string]int](t, res); got["canceled"] != 1 {
		t.Fatalf("cancel answered %v", got)
	}
	var a commandAnswer
	select {
	case a = <-answer:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled command did not answer within 20 s")
	}
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("the cancelled command answered %d %v: %s", a.status, a.err, a.body)
	}
	if !a.canceled || a.result.Stdout != "started\n" || strings.Contains(a.body, "never") {
		t.Fatalf("the result does not say it was cancelled: %s", a.body)
	}
	if took := time.Since(began); took > 25*time.Second {
		t.Fatalf("cancelling took %s", took)
	}
	// What it changed before it was stopped is an edit.
	changed := false
	for _, c := range decode[[]editsession.Change](t, owner.get(base+"/changes", jsonAccept)) {
		changed = changed || c.Path == "wrote.txt"
	}
	if !changed {
		t.Fatal("the file the command wrote before it was cancelled is not an edit")
	}
	// The history lists it as cancelled, not by the exit status the stop
	// left; a command that ran to its end is not.
	if out, _ := owner.run(base, "exit 3", ""); out.ExitCode != 3 {
		t.Fatalf("exit 3 ran as %+v", out)
	}
	hist := decode[struct{ Commands []models.SessionCommand }](t, owner.get(base+"/commands", jsonAccept))
	if len(hist.Commands) != 2 || !hist.Commands[1].Canceled || hist.Commands[0].Canceled || hist.Commands[0].ExitCode != 3 {
		t.Fatalf("history after a cancelled command and exit 3, newest first: %+v", hist.Commands)
	}
	page := readBody(owner.get(base+"/commands", header{"HX-Request": "true"}))
	if strings.Count(page, "cancelled") != 1 || !strings.Contains(page, `data-canceled="true"`) {
		t.Fatalf("the history partial does not mark the cancelled command:\n%s", page)
	}
	// The HTML result the command box shows says so too.
	htmlAnswer := owner.runInBackground(base, "sleep 30", true)
	waitRunning(t, h, s.ID)
	owner.post(base+"/commands/cancel", nil, jsonAccept)
	if a := <-htmlAnswer; !a.canceled {
		t.Fatalf("second cancel: %s", a.body)
	}
	expectProblem(t, owner.post(base+"/commands/cancel", nil, jsonAccept), http.StatusConflict, "no_running_command")
}

// Quick open in a session finds the files the session added, not those it
// deleted, and links to the session page; nobody else can search it.
func TestSessionFind(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	other := h.user("other", false)
	_, base := owner.session(id)
	if res := owner.put(base, "src/newthing.go", []byte("package main\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	_, etag, _ := owner.read(base, "src/old.txt")
	if res := owner.do(http.MethodDelete, base+"/file?path=src/old.txt", nil, header{"X-CSRF-Token": owner.csrf, "If-Match": etag}); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	paths := func(q string) []string {
		t.Helper()
		res := owner.get(base+"/find?q="+url.QueryEscape(q), header{"HX-Request": "true"})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("find %q: %d %s", q, res.StatusCode, readBody(res))
		}
		body := readBody(res)
		var out []string
		for _, part := range strings.Split(body, `data-path="`)[1:] {
			p, _, _ := strings.Cut(part, `"`)
			out = append(out, p)
			if !strings.Contains(body, `href="`+base+`?path=`+url.QueryEscape(p)) {
				t.Fatalf("find %q: %s does not open in the session: %s", q, p, body)
			}
		}
		return out
	}
	if got := paths("newth"); len(got) != 1 || got[0] != "src/newthing.go" {
		t.Fatalf("an added file: %q", got)
	}
	if got := paths("old"); len(got) != 0 {
		t.Fatalf("a deleted file is still found: %q", got)
	}
	if got := paths(""); strings.Join(got, " ") != "README.md src/main.go src/newthing.go" {
		t.Fatalf("every file: %q", got)
	}
	if got := paths("src"); len(got) != 2 {
		t.Fatalf("src: %q", got)
	}
	expectProblem(t, other.get(base+"/find?q=main", jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, owner.get(base+"/find?q="+strings.Repeat("a", 200), jsonAccept), http.StatusBadRequest, "query_too_long")
}
