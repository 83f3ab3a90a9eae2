package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"atelier/models"
	"atelier/terminal"
	"atelier/testrig/wait"
)

// recordingJSON is one recording as the lists give it.
type recordingJSON struct {
	ID        int64  `json:"id"`
	SessionID string `json:"sessionId"`
	State     string `json:"state"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
	Shared    bool   `json:"shared"`
}

// castOf checks that body is asciicast v2 (a header, then [time, code,
// data] events in time order) and returns its header and events.
func castOf(t *testing.T, body string) (map[string]any, [][3]any) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatal("the recording has no header")
	}
	var header map[string]any
	if err := json.Unmarshal(sc.Bytes(), &header); err != nil || header["version"] != 2.0 {
		t.Fatalf("header %q: %v", sc.Text(), err)
	}
	var events [][3]any
	last := 0.0
	for sc.Scan() {
		var e [3]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		at, ok := e[0].(float64)
		if _, isCode := e[1].(string); !ok || !isCode || at < last {
			t.Fatalf("event %q: not [time, code, data] in time order", sc.Text())
		}
		last = at
		events = append(events, e)
	}
	return header, events
}

// TestRecordATerminal: the owner records their shell; every stream of it
// hears REC start and stop; the recording of echo lines and a resize plays
// back the same text as asciicast v2; it is the owner's alone (others,
// admins included, neither record it nor see it) until shared with the
// project; deleting it lists its file for the collector.
func TestRecordATerminal(t *testing.T) {
	needRoot(t)
	recordATerminal(t, newHarness(t))
}

func TestRecordATerminalInAPod(t *testing.T) {
	needRoot(t)
	recordATerminal(t, newHarness(t, onKube(t)))
}

func recordATerminal(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	bob := h.user("bob", false)
	root := h.user("root", true)
	owner.addMember(id, "bob", "member")
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	recording := base + "/terminals/" + term.ID + "/recording"
	owned := header{"X-CSRF-Token": owner.csrf, "Accept": "application/json"}
	stream := owner.watch(t, base+"/terminals/"+term.ID+"/stream")

	// Nobody but the owner starts one.
	expectProblem(t, bob.post(recording, nil, jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, root.post(recording, nil, jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, owner.del(recording, owned), http.StatusConflict, "not_recording")

	list := decode[[]recordingJSON](t, owner.post(recording, nil, jsonAccept))
	if len(list) != 1 || list[0].State != "recording" {
		t.Fatalf("recordings after the start %+v", list)
	}
	stream.hearsRec(t, "on")
	expectProblem(t, owner.post(recording, nil, jsonAccept), http.StatusConflict, "recording")

	owner.input(base, term.ID, 1, "echo rec-$((6*7))\r")
	stream.sees(t, "rec-42")
	if res := owner.post(base+"/terminals/"+term.ID+"/resize", url.Values{"cols": {"100"}, "rows": {"30"}}, owned); res.StatusCode != http.StatusNoContent {
		t.Fatalf("resize: %d %s", res.StatusCode, readBody(res))
	}
	owner.input(base, term.ID, 2, "echo after-$((5*5))\r")
	stream.sees(t, "after-25")

	list = decode[[]recordingJSON](t, owner.del(recording, owned))
	if len(list) != 1 || list[0].State != "saved" || list[0].Bytes == 0 || list[0].Truncated {
		t.Fatalf("recordings after the stop %+v", list)
	}
	stream.hearsRec(t, "off")
	rec := list[0]
	cast := "/projects/" + itoa(id) + "/recordings/" + itoa(rec.ID) + "/cast"

	res = owner.get(cast, nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("download: %d %v", res.StatusCode, res.Header)
	}
	body := readBody(res)
	if int64(len(body)) != rec.Bytes {
		t.Fatalf("the file has %d bytes, the list says %d", len(body), rec.Bytes)
	}
	_, events := castOf(t, body)
	var text strings.Builder
	var resizes []string
	for _, e := range events {
		switch e[1] {
		case "o":
			text.WriteString(e[2].(string))
		case "r":
			resizes = append(resizes, e[2].(string))
		}
	}
	if !strings.Contains(text.String(), "rec-42") || !strings.Contains(text.String(), "after-25") {
		t.Fatalf("the recording plays %q", text.String())
	}
	if !slices.Equal(resizes, []string{"100x30"}) {
		t.Fatalf("the recording's resizes %v", resizes)
	}
	if page := owner.page("/projects/" + itoa(id) + "/recordings/" + itoa(rec.ID)); page.Find("#player[data-cast]").Length() != 1 {
		t.Fatal("the recording's page has no player")
	}

	// Unshared, it is the owner's alone: to others it does not exist.
	expectProblem(t, bob.get(cast, jsonAccept), http.StatusNotFound, "not_found")
	expectProblem(t, root.get(cast, jsonAccept), http.StatusNotFound, "not_found")
	if bob.page("/projects/"+itoa(id)).Find("#shared-recordings").Length() != 0 {
		t.Fatal("bob's project page lists an unshared recording")
	}
	expectProblem(t, bob.post("/projects/"+itoa(id)+"/recordings/"+itoa(rec.ID)+"/share", url.Values{"shared": {"true"}}, jsonAccept), http.StatusNotFound, "not_found")

	// Shared, every member plays it; only its owner unshares or deletes it.
	if res := owner.post("/projects/"+itoa(id)+"/recordings/"+itoa(rec.ID)+"/share", url.Values{"shared": {"true"}}, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("share: %d %s", res.StatusCode, readBody(res))
	}
	if res := bob.get(cast, nil); res.StatusCode != http.StatusOK || readBody(res) != body {
		t.Fatalf("bob's download of a shared recording: %d", res.StatusCode)
	}
	if bob.page("/projects/"+itoa(id)).Find("#shared-recordings li").Length() != 1 {
		t.Fatal("bob's project page does not list the shared recording")
	}
	expectProblem(t, bob.del("/projects/"+itoa(id)+"/recordings/"+itoa(rec.ID), jsonAccept), http.StatusNotFound, "not_found")

	// The recordings a person keeps are bounded, under their row's lock.
	ownerRow, err := h.store.UserByName(context.Background(), "owner")
	if err != nil {
		t.Fatal(err)
	}
	extra := &models.TerminalRecording{ProjectID: id, UserID: ownerRow.ID, SessionID: list[0].SessionID, TerminalID: term.ID, StartedAt: time.Now()}
	if err := h.store.StartRecording(context.Background(), extra, 1); !errors.Is(err, models.ErrTooManyRecordings) {
		t.Fatalf("a recording past the bound: %v", err)
	}

	if res := owner.del("/projects/"+itoa(id)+"/recordings/"+itoa(rec.ID), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, owner.get(cast, jsonAccept), http.StatusNotFound, "not_found")
	doomed, err := h.store.DoomedAfter(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(doomed, func(o models.StoredObject) bool { return o.Key == "recordings/"+itoa(rec.ID)+".cast" }) {
		t.Fatalf("the deleted recording's file is not listed for the collector: %+v", doomed)
	}
}

// TestARecordingStopsAtItsBound: output past ATELIER_RECORDING_MAX_BYTES
// ends the recording inside the bound with a note, the streams hear it
// stop, and the list says it stopped there.
func TestARecordingStopsAtItsBound(t *testing.T) {
	needRoot(t)
	recordingStopsAtItsBound(t)
}

func TestARecordingStopsAtItsBoundInAPod(t *testing.T) {
	needRoot(t)
	recordingStopsAtItsBound(t, onKube(t))
}

func recordingStopsAtItsBound(t *testing.T, tweak ...func(*Config)) {
	h := newHarness(t, append(tweak, func(c *Config) { c.RecordingMaxBytes = terminal.MinRecordingBytes })...)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	stream := owner.watch(t, base+"/terminals/"+term.ID+"/stream")
	decode[[]recordingJSON](t, owner.post(base+"/terminals/"+term.ID+"/recording", nil, jsonAccept))
	stream.hearsRec(t, "on")
	owner.input(base, term.ID, 1, "head -c 20000 /dev/zero | tr '\\0' x; echo; echo done-$((2*3))\r")
	stream.sees(t, "done-6")
	stream.hearsRec(t, "off")

	var rec recordingJSON
	saved := wait.Until(wait.Short, func() bool {
		list := decode[[]recordingJSON](t, owner.get(base+"/recordings", jsonAccept))
		if len(list) == 1 && list[0].State == "saved" {
			rec = list[0]
			return true
		}
		return false
	})
	if !saved {
		t.Fatal("the recording was never saved")
	}
	if !rec.Truncated || rec.Bytes > terminal.MinRecordingBytes {
		t.Fatalf("a recording past its bound: %+v", rec)
	}
	_, events := castOf(t, readBody(owner.get("/projects/"+itoa(id)+"/recordings/"+itoa(rec.ID)+"/cast", nil)))
	if last := events[len(events)-1]; last[1] != "m" || last[2] != terminal.FullNote {
		t.Fatalf("the recording ends with %v, not the note", last)
	}
	if !strings.Contains(readBody(owner.get("/projects/"+itoa(id)+"/recordings/"+itoa(rec.ID), nil)), "stopped when it reached its size limit") {
		t.Fatal("the recording's page does not say it stopped at its bound")
	}
}
