package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/limits"
	"atelier/models"
	"atelier/terminal"
	"atelier/testrig/wait"
)

// sseEvent is one event of a stream, with when it arrived.
type sseEvent struct {
	name, id, data string
	at             time.Time
}

// follow opens path as an event stream (lastID, when not empty, as
// Last-Event-ID) and delivers its events until it ends; the channel
// closes then. The stream ends with the test.
func (c *client) follow(t *testing.T, path, lastID string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.h.srv.URL+path, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream %s: %d %s", path, res.StatusCode, readBody(res))
	}
	events := make(chan sseEvent, 1024)
	go func() {
		defer close(events)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.name != "" {
					e.at = time.Now()
					events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				e.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				e.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return events
}

// commandExitJSON is a command stream's exit event.
type commandExitJSON struct {
	Code       int      `json:"code"`
	Canceled   bool     `json:"canceled"`
	DurationMS int64    `json:"durationMs"`
	Notes      []string `json:"notes"`
	Error      string   `json:"error"`
}

// drain reads a command stream to its exit: the bytes of its text and
// out events in order, checking that each id is the offset after its
// bytes, from offset from.
func drain(t *testing.T, events <-chan sseEvent, from int) (string, commandExitJSON) {
	t.Helper()
	var out strings.Builder
	timeout := time.After(60 * time.Second)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended without exit after %q", out.String())
			}
			switch e.name {
			case "text", "out":
				b, _, err := outputOf(e.name, e.data)
				if err != nil {
					t.Fatal(err)
				}
				out.Write(b)
				if want := itoa(int64(from + out.Len())); e.id != want {
					t.Fatalf("out event id %s, want %s", e.id, want)
				}
			case "exit":
				var x commandExitJSON
				if err := json.Unmarshal([]byte(e.data), &x); err != nil {
					t.Fatalf("exit data %q: %v", e.data, err)
				}
				return out.String(), x
			default:
				t.Fatalf("%s event in a stream that kept up", e.name)
			}
		case <-timeout:
			t.Fatalf("no exit within a minute; got %q", out.String())
		}
	}
}

// A command that prints a line a second streams each line to its
// viewers while it runs; a viewer that comes mid-run from offset 0 or
// from a later offset (as a reloaded page resumes) gets exactly the bytes
// from there, then the exit with the notes the answer has. The answer to
// the request is as it always was. Nobody else may follow the stream,
// and none is left once the command has ended.
func TestCommandOutputStreamsLive(t *testing.T) {
	needRoot(t)
	commandOutputStreamsLive(t, newHarness(t))
}

func TestCommandOutputStreamsLiveInAPod(t *testing.T) {
	needRoot(t)
	commandOutputStreamsLive(t, newHarness(t, onKube(t)))
}

func commandOutputStreamsLive(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	other := h.user("other", false)
	owner.addMember(id, "other", "admin")
	s, base := owner.session(id)
	stream := base + "/commands/current/stream"

	expectProblem(t, owner.get(stream, jsonAccept), http.StatusConflict, "no_running_command")
	const script = `printf 'x\0y' > blob.bin; for i in 1 2 3 4 5; do echo "line-$i"; sleep 1; done`
	const want = "line-1\nline-2\nline-3\nline-4\nline-5\n"
	answer := owner.runInBackground(base, script, false)
	waitRunning(t, h, s.ID)

	// The page rendered now names the command, for its script to follow.
	if got, _ := owner.page(base).Find(`#command-form`).Attr("data-running"); got != script {
		t.Fatalf("the session page names the running command %q", got)
	}
	expectProblem(t, other.get(stream, jsonAccept), http.StatusNotFound, "not_found")

	first := owner.follow(t, stream, "")
	var seen strings.Builder
	var lineAt []time.Time
	for len(lineAt) < 2 {
		select {
		case e := <-first:
			b, ok, err := outputOf(e.name, e.data)
			if !ok || err != nil {
				t.Fatalf("%s event while the command runs: %v", e.name, err)
			}
			seen.Write(b)
			for n := strings.Count(seen.String(), "\n"); len(lineAt) < n; {
				lineAt = append(lineAt, e.at)
			}
		case a := <-answer:
			t.Fatalf("the command answered (%+v) before its second line streamed; got %q", a, seen.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("no line within 30 s; got %q", seen.String())
		}
	}
	if seen.String() != "line-1\nline-2\n" {
		t.Fatalf("the first two lines read %q", seen.String())
	}
	// Mid-run, as a reloaded page attaches: from the first byte, and
	// from just after line-1 (the id a page last saw), by Last-Event-ID
	// and by ?from=.
	fromStart := owner.follow(t, stream+"?from=0", "")
	afterFirst := owner.follow(t, stream, "7")
	afterFirstQuery := owner.follow(t, stream+"?from=7", "")

	rest, exit := drain(t, first, seen.Len())
	if seen.String()+rest != want {
		t.Fatalf("the first viewer got %q", seen.String()+rest)
	}
	var a commandAnswer
	select {
	case a = <-answer:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not answer after its exit event")
	}
	if a.status != http.StatusOK || a.result.ExitCode != 0 || a.result.Stdout != want {
		t.Fatalf("the answer: %d %+v", a.status, a.result)
	}
	if exit.Code != 0 || exit.Canceled || exit.Error != "" || len(exit.Notes) == 0 ||
		strings.Join(exit.Notes, "\n") != strings.Join(a.result.Notes, "\n") {
		t.Fatalf("exit event %+v, the answer's notes %q", exit, a.result.Notes)
	}
	// Each line came a second after the one before, long before the end.
	if gap := lineAt[1].Sub(lineAt[0]); gap < 500*time.Millisecond {
		t.Fatalf("line-2 came %s after line-1: not as written", gap)
	}
	for name, viewer := range map[string]struct {
		events <-chan sseEvent
		from   int
	}{"from 0": {fromStart, 0}, "Last-Event-ID 7": {afterFirst, 7}, "from=7": {afterFirstQuery, 7}} {
		if got, x := drain(t, viewer.events, viewer.from); got != want[viewer.from:] || x.Code != 0 {
			t.Fatalf("the viewer %s got %q, exit %+v", name, got, x)
		}
	}
	expectProblem(t, owner.get(stream, jsonAccept), http.StatusConflict, "no_running_command")
	if _, ok := owner.page(base).Find(`#command-form`).Attr("data-running"); ok {
		t.Fatal("the session page still names a command that has ended")
	}
}

// A reload drops the request that ran a command: the command goes on, its
// output streams to the page that comes back, and it is audited as it
// ends.
func TestCommandOutlivesItsRequest(t *testing.T) {
	needRoot(t)
	commandOutlivesItsRequest(t, newHarness(t))
}

func TestCommandOutlivesItsRequestInAPod(t *testing.T) {
	needRoot(t)
	commandOutlivesItsRequest(t, newHarness(t, onKube(t)))
}

func commandOutlivesItsRequest(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)

	ctx, leave := context.WithCancel(context.Background())
	form := url.Values{"command": {"echo before; sleep 2; echo after"}, "csrf_token": {owner.csrf}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+base+"/commands", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if res, err := owner.http.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	waitRunning(t, h, s.ID)
	leave()
	<-gone

	if got, x := drain(t, owner.follow(t, base+"/commands/current/stream?from=0", ""), 0); got != "before\nafter\n" || x.Code != 0 {
		t.Fatalf("after the request went away the stream got %q, exit %+v", got, x)
	}
	hist := decode[struct{ Commands []models.SessionCommand }](t, owner.get(base+"/commands", jsonAccept))
	if len(hist.Commands) != 1 || hist.Commands[0].ExitCode != 0 || hist.Commands[0].Canceled {
		t.Fatalf("the history: %+v", hist.Commands)
	}
}

// One command takes eight viewers, and its streams count in the
// account's 64 event streams.
func TestCommandStreamsAreBounded(t *testing.T) {
	needRoot(t)
	commandStreamsAreBounded(t, newHarness(t))
}

func TestCommandStreamsAreBoundedInAPod(t *testing.T) {
	needRoot(t)
	commandStreamsAreBounded(t, newHarness(t, onKube(t)))
}

func commandStreamsAreBounded(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	stream := base + "/commands/current/stream"
	answer := owner.runInBackground(base, "echo started; sleep 60", false)
	waitRunning(t, h, s.ID)
	output := func() *terminal.Output {
		out, err := h.app.Runtime.CommandOutput(&editsession.Session{CodeSession: &models.CodeSession{ID: s.ID}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Cancelled once it runs: the first command of a session builds its
	// checkout first.
	wait.For(t, wait.Long, "the command to start", func() bool { return output().Offset() > 0 })

	var viewers []func()
	for i := range 8 {
		res, close := owner.openStream(stream)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("viewer %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
		viewers = append(viewers, close)
	}
	ninth, _ := owner.openStream(stream)
	expectRefusedStream(t, ninth)
	for _, close := range viewers {
		close()
	}
	wait.For(t, wait.Short, "the viewers to leave", func() bool { return output().Viewers() == 0 })

	// The account's other streams fill its bound: the command's stream
	// is refused before it starts.
	for i := range limits.StreamsPerAccount {
		res, _ := owner.openStream("/projects/" + itoa(id) + "/events")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("project stream %d: %d %s", i+1, res.StatusCode, readBody(res))
		}
	}
	res, _ := owner.openStream(stream)
	expectRefusedStream(t, res)

	owner.post(base+"/commands/cancel", nil, jsonAccept)
	if a := <-answer; !a.canceled {
		t.Fatalf("the command was not cancelled: %+v", a)
	}
}

// A cancel that comes as the session's first command starts (most often
// while its checkout is still built, else just after) answers a cancelled
// command, as any cancel does, and nothing of the command runs on.
func TestCancelBeforeTheCommandStarts(t *testing.T) {
	needRoot(t)
	cancelBeforeTheCommandStarts(t, newHarness(t))
}

func TestCancelBeforeTheCommandStartsInAPod(t *testing.T) {
	needRoot(t)
	cancelBeforeTheCommandStarts(t, newHarness(t, onKube(t)))
}

func cancelBeforeTheCommandStarts(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	answer := owner.runInBackground(base, "sleep 30; echo never", false)
	waitRunning(t, h, s.ID)
	if res := owner.post(base+"/commands/cancel", nil, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d %s", res.StatusCode, readBody(res))
	}
	if a := <-answer; a.status != http.StatusOK || !a.canceled || strings.Contains(a.body, "never") {
		t.Fatalf("the command cancelled before it started answered %d %s", a.status, a.body)
	}
}
