package server

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/models"
)

// shareJSON is one share as the shares list gives it.
type shareJSON struct {
	UserID   int64  `json:"userId"`
	Username string `json:"username"`
	Watching bool   `json:"watching"`
}

// watchStream follows a watch stream in the background: out collects the
// decoded output, ended closes when the server ends the stream.
type watchStream struct {
	seen  chan string // each time the output grows, all of it
	recs  chan string // each rec event's data: on or off
	ended chan struct{}
	stop  context.CancelFunc
}

func (c *client) watch(t *testing.T, path string) *watchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.h.srv.URL+path, nil)
	res, err := c.http.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("watch stream: %d %s", res.StatusCode, readBody(res))
	}
	w := &watchStream{seen: make(chan string, 1000), recs: make(chan string, 100), ended: make(chan struct{}), stop: cancel}
	go func() {
		defer close(w.ended)
		defer res.Body.Close()
		var out strings.Builder
		var event string
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && (event == "text" || event == "out"):
				b, _, _ := outputOf(event, strings.TrimPrefix(line, "data: "))
				out.Write(b)
				select {
				case w.seen <- out.String():
				default:
				}
			case strings.HasPrefix(line, "data: ") && event == "rec":
				w.recs <- strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.ended })
	return w
}

// hearsRec waits for the stream's next rec event and checks it says want.
func (w *watchStream) hearsRec(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-w.recs:
		if got != want {
			t.Fatalf("rec %q, want %q", got, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no rec %s came", want)
	}
}

// sees waits until the stream's output holds want.
func (w *watchStream) sees(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case out := <-w.seen:
			if strings.Contains(out, want) {
				return
			}
		case <-w.ended:
			t.Fatalf("the watch stream ended before %q", want)
		case <-timeout:
			t.Fatalf("the watch stream never showed %q", want)
		}
	}
}

// TestWatchASharedTerminal: the owner of a shell shares it with a member
// of the project, who watches the same live output and may neither type,
// resize nor close it (403); nobody else learns of it (404); the owner
// sees who watches; revoking the share ends the watch at once and
// refuses the next.
func TestWatchASharedTerminal(t *testing.T) {
	needRoot(t)
	watchASharedTerminal(t, newHarness(t))
}

func TestWatchASharedTerminalInAPod(t *testing.T) {
	needRoot(t)
	watchASharedTerminal(t, newHarness(t, onKube(t)))
}

func watchASharedTerminal(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	bob := h.user("bob", false)
	dave := h.user("dave", false)
	h.user("carol", false) // not a member
	owner.addMember(id, "bob", "member")
	owner.addMember(id, "dave", "member")
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	shares := base + "/terminals/" + term.ID + "/shares"
	watchPage := base + "/terminals/" + term.ID + "/watch"
	watchStream := watchPage + "/stream"

	// Only members, and not oneself.
	expectProblem(t, owner.post(shares, url.Values{"username": {"carol"}}, jsonAccept), http.StatusBadRequest, "not_a_member")
	expectProblem(t, owner.post(shares, url.Values{"username": {"nobody"}}, jsonAccept), http.StatusBadRequest, "not_a_member")
	expectProblem(t, owner.post(shares, url.Values{"username": {"owner"}}, jsonAccept), http.StatusBadRequest, "share_with_self")
	// Before a share, bob knows nothing of the shell.
	expectProblem(t, bob.get(watchStream, jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, bob.input(base, term.ID, 1, "id\r"), http.StatusNotFound, "not_found")

	list := decode[[]shareJSON](t, owner.post(shares, url.Values{"username": {"bob"}}, jsonAccept))
	if len(list) != 1 || list[0].Username != "bob" || list[0].Watching {
		t.Fatalf("shares %+v", list)
	}
	// The bound holds under its lock: with one share taken of one allowed,
	// sharing again with bob changes nothing and dave is refused.
	ctx := context.Background()
	bobRow, err := h.store.UserByName(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	daveRow, err := h.store.UserByName(ctx, "dave")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.ShareTerminal(ctx, term.ID, bobRow.ID, 1, time.Now()); err != nil {
		t.Fatalf("sharing again: %v", err)
	}
	if err := h.store.ShareTerminal(ctx, term.ID, daveRow.ID, 1, time.Now()); !errors.Is(err, models.ErrTooManyShares) {
		t.Fatalf("a share past the bound: %v", err)
	}
	// Nor can a watcher share it on: only its owner.
	expectProblem(t, bob.post(shares, url.Values{"username": {"dave"}}, jsonAccept), http.StatusForbidden, "watch_only")
	expectProblem(t, dave.post(shares, url.Values{"username": {"dave"}}, jsonAccept), http.StatusNotFound, "not_found")

	if res := bob.get(watchPage, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("watch page: %d", res.StatusCode)
	} else if body := readBody(res); !strings.Contains(body, "shares this terminal with you to watch") {
		t.Fatalf("watch page: %s", body)
	}
	w := bob.watch(t, watchStream)
	owner.input(base, term.ID, 1, "echo watch-$((6*7))\r")
	w.sees(t, "watch-42")

	// Watching is not typing.
	bobCSRF := header{"X-CSRF-Token": bob.csrf, "Accept": "application/json"}
	expectProblem(t, bob.input(base, term.ID, 2, "echo from-bob\r"), http.StatusForbidden, "watch_only")
	expectProblem(t, bob.post(base+"/terminals/"+term.ID+"/resize", url.Values{"cols": {"50"}, "rows": {"10"}}, bobCSRF), http.StatusForbidden, "watch_only")
	expectProblem(t, bob.del(base+"/terminals/"+term.ID, bobCSRF), http.StatusForbidden, "watch_only")
	// dave, a member without a share, learns nothing.
	expectProblem(t, dave.get(watchStream, jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, dave.input(base, term.ID, 2, "id\r"), http.StatusNotFound, "not_found")

	// The owner sees bob watching.
	list = decode[[]shareJSON](t, owner.get(shares, jsonAccept))
	if len(list) != 1 || !list[0].Watching {
		t.Fatalf("shares while bob watches %+v", list)
	}

	// Revoked: bob's stream ends at once, and the next is refused.
	start := time.Now()
	list = decode[[]shareJSON](t, owner.del(shares+"/"+itoa(list[0].UserID), header{"X-CSRF-Token": owner.csrf, "Accept": "application/json"}))
	if len(list) != 0 {
		t.Fatalf("shares after revoking %+v", list)
	}
	select {
	case <-w.ended:
		t.Logf("the watch ended %v after the revocation", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("bob's watch went on after the share was revoked")
	}
	expectProblem(t, bob.get(watchStream, jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, bob.input(base, term.ID, 2, "id\r"), http.StatusNotFound, "not_found")

	// Shared again, then bob is taken out of the project: his open watch
	// ends at the shells' next beat (within workbench.LeaseEvery), which
	// the test runs itself.
	decode[[]shareJSON](t, owner.post(shares, url.Values{"username": {"bob"}}, jsonAccept))
	w = bob.watch(t, watchStream)
	w.sees(t, "watch-42")
	if res := owner.del("/projects/"+itoa(id)+"/members/bob", header{"X-CSRF-Token": owner.csrf, "Accept": "application/json"}); res.StatusCode != http.StatusOK {
		t.Fatalf("removing bob: %d %s", res.StatusCode, readBody(res))
	}
	h.app.Shells.Heartbeat(context.Background())
	select {
	case <-w.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("bob watched on after leaving the project")
	}

	// The owner's own terminal went on all along.
	if out, _ := owner.streamUntil(t, base+"/terminals/"+term.ID+"/stream", "watch-42"); !strings.Contains(out, "watch-42") {
		t.Fatalf("owner's output %q", out)
	}
}

// TestAWatcherReachesTheShellThroughAnyInstance: with the shell on a, a
// watcher's stream through b is handed to a and carries the shell's
// output; typing through b is refused there (403), and stopping the share
// through b ends the watch that a serves.
func TestAWatcherReachesTheShellThroughAnyInstance(t *testing.T) {
	needRoot(t)
	watcherReachesTheShellThroughAnyInstance(t)
}

func TestAWatcherReachesTheShellThroughAnyInstanceInAPod(t *testing.T) {
	needRoot(t)
	watcherReachesTheShellThroughAnyInstance(t, onKube(t))
}

func watcherReachesTheShellThroughAnyInstance(t *testing.T, tweak ...func(*Config)) {
	a, b, owner, _, base := clusterOf(t, tweak...)
	id, err := strconv.ParseInt(strings.Split(base, "/")[2], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	a.user("bob", false)
	owner.addMember(id, "bob", "member")
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := a.app.Terminals.Get(term.ID); err != nil {
		t.Fatalf("the shell does not run on a: %v", err)
	}
	shares := base + "/terminals/" + term.ID + "/shares"
	list := decode[[]shareJSON](t, owner.post(shares, url.Values{"username": {"bob"}}, jsonAccept))
	if len(list) != 1 {
		t.Fatalf("shares %+v", list)
	}

	bobOnB := b.signIn("bob")
	w := bobOnB.watch(t, base+"/terminals/"+term.ID+"/watch/stream")
	owner.input(base, term.ID, 1, "echo far-$((6*7))\r")
	w.sees(t, "far-42")
	expectProblem(t, bobOnB.input(base, term.ID, 2, "id\r"), http.StatusForbidden, "watch_only")

	ownerOnB := b.signIn("owner")
	ownerOnB.del(shares+"/"+itoa(list[0].UserID), header{"X-CSRF-Token": ownerOnB.csrf, "Accept": "application/json"})
	select {
	case <-w.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the watch through b went on after the share was stopped through b")
	}
}
