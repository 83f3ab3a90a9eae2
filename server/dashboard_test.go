package server

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"atelier/events"
	"atelier/limits"
	"atelier/meter"
	"atelier/models"
	"atelier/testrig/wait"
)

// dashboardURLs are every URL of the dashboard, with what each changes.
var dashboardURLs = []struct{ method, path string }{
	{http.MethodGet, "/admin"},
	{http.MethodGet, "/admin?part=meters"},
	{http.MethodGet, "/admin?part=storage"},
	{http.MethodGet, "/admin/meters"},
	{http.MethodGet, "/admin/meters.csv"},
	{http.MethodGet, "/admin/sessions"},
	{http.MethodGet, "/admin/terminals"},
	{http.MethodGet, "/admin/stream"},
	{http.MethodPost, "/admin/sessions/SID/end"},
	{http.MethodPost, "/admin/terminals/TID/close"},
	{http.MethodPost, "/admin/projects/PID/cap"},
}

// Nobody but a site admin learns the dashboard exists: signed out, signed
// in as a project's owner, as JSON, htmx or a browser, every URL answers
// 404 and nothing changes; the nav link shows for site admins only.
func TestDashboardHiddenFromNonAdmins(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	root := h.user("root", true)
	id := owner.createProject("mine")
	sid := openSessionRow(t, h, owner, id)
	for _, who := range []struct {
		name string
		c    *client
	}{{"anonymous", h.anonymous()}, {"a project owner", owner}} {
		for _, u := range dashboardURLs {
			path := strings.NewReplacer("SID", sid, "TID", "term_x", "PID", itoa(id)).Replace(u.path)
			for _, hdr := range []header{jsonAccept, {"HX-Request": "true"}, {"Accept": "text/html"}} {
				var res *http.Response
				if u.method == http.MethodPost {
					res = who.c.post(path, url.Values{"capSeconds": {"1"}}, hdr)
				} else {
					res = who.c.get(path, hdr)
				}
				body := readBody(res)
				if res.StatusCode != http.StatusNotFound {
					t.Errorf("%s %s %s %v: %d, want 404: %.200s", who.name, u.method, path, hdr, res.StatusCode, body)
				}
				if strings.Contains(body, "text/event-stream") || strings.Contains(body, "Dashboard") && res.StatusCode == http.StatusOK {
					t.Errorf("%s %s %s: the dashboard showed", who.name, u.method, path)
				}
			}
		}
	}
	if p, _ := h.store.ProjectByID(t.Context(), id); p == nil {
		t.Fatal("project gone")
	}
	if u := usageOf(t, h, id); u.Cap != h.cfg.SandboxCap {
		t.Errorf("a refused cap changed the cap to %d", u.Cap)
	}
	if cs, _ := h.store.SessionByID(t.Context(), sid); cs.State != models.SessionOpen {
		t.Errorf("a refused end ended the session: %s", cs.State)
	}
	if n := owner.page("/projects").Find(`header nav a[href="/admin"]`).Length(); n != 0 {
		t.Errorf("the nav shows the dashboard to a non-admin")
	}
	if n := root.page("/projects").Find(`header nav a[href="/admin"]`).Length(); n != 1 {
		t.Errorf("the nav lacks the dashboard for a site admin")
	}
}

// openSessionRow opens a session row directly (no sandbox needed) for c on
// project id and returns its id.
func openSessionRow(t *testing.T, h *harness, c *client, id int64) string {
	t.Helper()
	owner, err := h.store.UserByName(t.Context(), "owner")
	if err != nil {
		t.Fatal(err)
	}
	sid := "edit_" + strings.Repeat("ab", 16)
	cs := &models.CodeSession{ID: sid, ProjectID: id, UserID: owner.ID, BaseCommit: strings.Repeat("0", 40),
		State: models.SessionOpen, OpenedAt: time.Now(), LastSeenAt: time.Now()}
	if err := h.store.CreateSession(t.Context(), cs); err != nil {
		t.Fatal(err)
	}
	return sid
}

func usageOf(t *testing.T, h *harness, id int64) meter.Usage {
	t.Helper()
	u, err := h.app.Meter.Usage(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// setCounter writes a project's counter of the month n months before this
// one.
func setCounter(t *testing.T, h *harness, id int64, monthsAgo int, used int64) {
	t.Helper()
	month := meter.MonthOf(h.clock.Now()).AddDate(0, -monthsAgo, 0).Format(time.DateOnly)
	if err := h.store.Exec(t.Context(), `INSERT INTO usage_counters (project_id, month, used_seconds) VALUES (?, CAST(? AS date), ?)
		ON CONFLICT (project_id, month) DO UPDATE SET used_seconds = EXCLUDED.used_seconds`, id, month, used); err != nil {
		t.Fatal(err)
	}
}

// The meters: the CSV's sums are the counters', the JSON is this month,
// the chart has six bars for a project with six months and for one with
// none, the 80 % and 95 % marks show on the dashboard and on the
// project's own page, filtering and ordering work, and the cap is set and
// given back to the default inline.
func TestDashboardMeters(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	root := h.user("root", true)
	busy := owner.createProject("busy")
	quiet := owner.createProject("quiet")
	low := owner.createProject("low")
	fresh := owner.createProject("fresh")                          // no history at all
	for ago, used := range []int64{900, 500, 400, 300, 200, 100} { // this month first
		setCounter(t, h, busy, ago, used)
	}
	setCounter(t, h, busy, 9, 7777) // older than the chart, still in the report
	setCounter(t, h, low, 0, 85)
	for id, cap := range map[int64]string{busy: "1000", low: "100"} {
		if res := root.post("/admin/projects/"+itoa(id)+"/cap", url.Values{"capSeconds": {cap}}, jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("cap: %d %s", res.StatusCode, readBody(res))
		}
	}

	ctx := t.Context()
	r, err := h.app.Meter.Reserve(ctx, quiet, h.app.Instance)
	if err != nil {
		t.Fatal(err)
	}
	start := h.clock.Now()
	if _, err := h.app.Meter.Settle(ctx, r, start, start.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, h, quiet); u.Used == 0 || u.Reserved != 0 {
		t.Fatalf("quiet after one settled reservation: %+v", u)
	}
	// The report sums to the counters, project by project.
	res := root.get("/admin/meters.csv", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	records, err := csv.NewReader(res.Body).ReadAll()
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, r := range records[1:] {
		n, _ := strconv.ParseInt(r[3], 10, 64)
		sums[r[0]] += n
	}
	// quiet's counter comes from the meter itself: a real reservation,
	// settled after 30 s of work.
	want := map[string]int64{itoa(busy): 900 + 500 + 400 + 300 + 200 + 100 + 7777, itoa(low): 85,
		itoa(quiet): usageOf(t, h, quiet).Used}
	if len(sums) != len(want) {
		t.Errorf("csv has %d projects, want %d: %v", len(sums), len(want), sums)
	}
	for id, n := range want {
		if sums[id] != n {
			t.Errorf("project %s: csv sums %d, counters %d", id, sums[id], n)
		}
	}

	// JSON: this month's meters, with the contract's names.
	type meterJSON struct {
		ProjectID       int64  `json:"projectId"`
		Project         string `json:"project"`
		Month           string `json:"month"`
		UsedSeconds     int64  `json:"usedSeconds"`
		ReservedSeconds int64  `json:"reservedSeconds"`
		CapSeconds      int64  `json:"capSeconds"`
	}
	ms := decode[[]meterJSON](t, root.get("/admin/meters", jsonAccept))
	got := map[int64]meterJSON{}
	for _, m := range ms {
		got[m.ProjectID] = m
	}
	month := meter.MonthOf(h.clock.Now()).Format("2006-01")
	if m := got[busy]; m.UsedSeconds != 900 || m.CapSeconds != 1000 || m.Project != "busy" || m.Month != month {
		t.Errorf("busy: %+v", m)
	}
	if m := got[quiet]; m.UsedSeconds != usageOf(t, h, quiet).Used || m.CapSeconds != h.cfg.SandboxCap {
		t.Errorf("quiet: %+v", m)
	}

	// The page: charts, marks.
	doc := root.page("/admin")
	bars := doc.Find("#meter-" + itoa(busy) + " svg.chart rect.bar")
	if bars.Length() != 6 {
		t.Fatalf("busy has %d bars, want 6", bars.Length())
	}
	for i, want := range []string{"100", "200", "300", "400", "500", "900"} { // oldest first
		if v := bars.Eq(i).AttrOr("data-value", ""); v != want {
			t.Errorf("busy bar %d: %s, want %s", i, v, want)
		}
	}
	if hgt := bars.Eq(5).AttrOr("height", ""); hgt != "28" { // 900 of the cap of 1000, which tops the scale
		t.Errorf("the highest bar is %s high, want 28 of 32", hgt)
	}
	empty := doc.Find("#meter-" + itoa(fresh) + " svg.chart rect.bar")
	if empty.Length() != 6 {
		t.Fatalf("fresh has %d bars, want 6", empty.Length())
	}
	empty.Each(func(i int, s *goquery.Selection) {
		if s.AttrOr("height", "") != "0" || s.AttrOr("data-value", "") != "0" {
			t.Errorf("fresh bar %d: height %s value %s", i, s.AttrOr("height", ""), s.AttrOr("data-value", ""))
		}
	})
	for id, mark := range map[int64]string{busy: "80", low: "80", quiet: "0"} { // 90 %, 85 %, a few seconds
		if got := doc.Find("#meter-"+itoa(id)).AttrOr("data-mark", ""); got != mark {
			t.Errorf("project %d marked %q, want %q", id, got, mark)
		}
	}
	setCounter(t, h, low, 0, 96)
	if got := root.fragment("/admin?part=meters").Find("#meter-"+itoa(low)).AttrOr("data-mark", ""); got != "95" {
		t.Errorf("96 of 100: marked %q, want 95", got)
	}
	// The project's own pages warn too.
	if w := owner.page("/projects/" + itoa(low)).Find(".meter-warning"); w.AttrOr("data-mark", "") != "95" {
		t.Errorf("the project page of a project at 96 %%: warning %q", w.Text())
	}
	if w := owner.page("/projects/" + itoa(quiet)).Find(".meter-warning"); w.Length() != 0 {
		t.Errorf("a quiet project warns: %q", w.Text())
	}

	// Filter by name, order by use.
	frag := root.fragment("/admin?part=meters&q=QUI")
	if n := frag.Find("tr.meter-row").Length(); n != 1 || frag.Find("#meter-"+itoa(quiet)).Length() != 1 {
		t.Errorf("filter qui: %d rows", n)
	}
	frag = root.fragment("/admin?part=meters&sort=use")
	var order []string
	frag.Find("tr.meter-row").Each(func(_ int, s *goquery.Selection) { order = append(order, s.AttrOr("data-project", "")) })
	if strings.Join(order, ",") != strings.Join([]string{itoa(low), itoa(busy), itoa(quiet), itoa(fresh)}, ",") {
		t.Errorf("by use: %v", order)
	}

	// The cap inline: a bad value is refused, empty restores the default.
	for _, bad := range []string{"-1", "abc", "1.5"} {
		expectProblem(t, root.post("/admin/projects/"+itoa(busy)+"/cap", url.Values{"capSeconds": {bad}}, jsonAccept), http.StatusBadRequest, "bad_cap")
	}
	expectProblem(t, root.post("/admin/projects/999999/cap", url.Values{"capSeconds": {"5"}}, jsonAccept), http.StatusNotFound, "not_found")
	frag = root.fragmentPost("/admin/projects/"+itoa(busy)+"/cap", url.Values{"capSeconds": {""}})
	if cap := frag.Find("#meter-"+itoa(busy)).AttrOr("data-cap", ""); cap != strconv.FormatInt(h.cfg.SandboxCap, 10) {
		t.Errorf("after restoring the default the row shows cap %s", cap)
	}
	if u := usageOf(t, h, busy); u.Cap != h.cfg.SandboxCap {
		t.Errorf("cap %d after restoring the default", u.Cap)
	}
}

// fragmentPost posts form as htmx does and parses the fragment answered.
func (c *client) fragmentPost(path string, form url.Values) *goquery.Document {
	c.h.t.Helper()
	res := c.post(path, form, header{"HX-Request": "true"})
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("POST %s (htmx): %d %s", path, res.StatusCode, readBody(res))
	}
	doc, err := goquery.NewDocumentFromReader(res.Body)
	if err != nil {
		c.h.t.Fatal(err)
	}
	return doc
}

// dashboardStream is one tab's live stream, read in the background.
type dashboardStream struct {
	mu    sync.Mutex
	hints map[string]int
	done  chan struct{}
}

func (s *dashboardStream) count(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hints[topic]
}

// followDashboard opens /admin/stream as c on transport tr and counts the
// hints it brings until ctx ends.
func followDashboard(ctx context.Context, t *testing.T, c *client, tr *http.Transport) (*dashboardStream, int) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.h.srv.URL+"/admin/stream", nil)
	req.Header.Set("Accept", "application/json, text/event-stream")
	hc := &http.Client{Transport: tr, Jar: c.http.Jar}
	res, err := hc.Do(req)
	if err != nil {
		t.Error(err)
		return nil, 0
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		res.Body.Close()
		return nil, res.StatusCode
	}
	s := &dashboardStream{hints: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if topic, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				s.mu.Lock()
				s.hints[topic]++
				s.mu.Unlock()
			}
		}
	}()
	return s, res.StatusCode
}

// soak is how long the many-tabs test holds its tabs open:
// ATELIER_DASHBOARD_SOAK (e.g. 60s, the figure), else a few
// seconds, so the normal run stays short while the same assertions hold.
func soak(t *testing.T) time.Duration {
	if s := os.Getenv("ATELIER_DASHBOARD_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("ATELIER_DASHBOARD_SOAK: %v", err)
		}
		return d
	}
	return 3 * time.Second
}

// 100 dashboards follow the live stream at once while meters change: every
// tab gets every hint, and once they close the server's goroutines and
// heap return to where they were.
func TestDashboardManyTabs(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	admins := []*client{h.user("root-1", true), h.user("root-2", true)}
	id := owner.createProject("watched")
	tr := &http.Transport{MaxIdleConnsPerHost: -1}
	defer tr.CloseIdleConnections()

	settle := func() (goroutines int, heap uint64) {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	goroutines0, heap0 := settle()

	const tabs = 100
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []*dashboardStream
	for i := range tabs {
		// 50 tabs per account: one account may hold 64 streams.
		s, status := followDashboard(ctx, t, admins[i%2], tr)
		if status != http.StatusOK {
			t.Fatalf("tab %d: %d", i+1, status)
		}
		streams = append(streams, s)
	}
	wait.For(t, wait.Short, "every tab to be following", func() bool { return h.app.Events.Followers() == tabs })

	changes := 0
	deadline := time.Now().Add(soak(t))
	for time.Now().Before(deadline) {
		seconds := int64(1000 + changes)
		if err := h.app.Meter.SetCap(ctx, id, &seconds); err != nil {
			t.Fatal(err)
		}
		changes++
		// Every tab has this change's hint before the next change, so
		// each change is its own hint rather than gathered with the next.
		wait.For(t, wait.Short, fmt.Sprintf("every tab to get hint %d", changes), func() bool {
			return !slices.ContainsFunc(streams, func(s *dashboardStream) bool { return s.count(events.TopicMeters) < changes })
		})
	}
	most := 0
	wait.For(t, wait.Short, "every tab to get every hint", func() bool {
		most = 0
		for _, s := range streams {
			most = max(most, s.count(events.TopicMeters))
		}
		for _, s := range streams {
			if s.count(events.TopicMeters) != most {
				return false
			}
		}
		return most >= changes*9/10 // a change and the next may share a hint on a busy machine
	})
	t.Logf("%d tabs, %d changes over %v, %d hints each", tabs, changes, soak(t), most)

	cancel()
	for _, s := range streams {
		<-s.done
	}
	tr.CloseIdleConnections()
	wait.For(t, wait.Long, "the server to let go of every tab", func() bool { return h.app.Events.Followers() == 0 })
	var goroutines int
	var heap uint64
	wait.For(t, wait.Long, "goroutines and memory to return to their level", func() bool {
		goroutines, heap = settle()
		return goroutines <= goroutines0+2 && heap <= heap0+4<<20
	})
	t.Logf("goroutines %d → %d, heap %d KiB → %d KiB", goroutines0, goroutines, heap0>>10, heap>>10)
}

// A dashboard's stream is one of its account's 64 event streams.
func TestDashboardStreamsCountInTheGate(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root", true)
	for i := range limits.StreamsPerAccount - 1 {
		if res, _ := admin.openStream("/admin/stream"); res.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i+1, res.StatusCode)
		}
	}
	if res, _ := admin.openStream("/admin/events"); res.StatusCode != http.StatusOK {
		t.Fatalf("the 64th stream: %d", res.StatusCode)
	}
	res, _ := admin.openStream("/admin/stream")
	expectRefusedStream(t, res)
}

// Ending a session from the dashboard ends it everywhere: its owner's page
// answers 410 with reason admin and says why, its shell closes, its
// sandbox time settles, the event names the admin, and the dashboard's
// lists no longer hold it.
func TestDashboardEndsSessionEverywhere(t *testing.T) {
	needRoot(t)
	dashboardEndsSessionEverywhere(t, newHarness(t))
}

func TestDashboardEndsSessionEverywhereInAPod(t *testing.T) {
	needRoot(t)
	dashboardEndsSessionEverywhere(t, newHarness(t, onKube(t)))
}

func dashboardEndsSessionEverywhere(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	root := h.user("root", true)
	s, base := owner.session(id)
	if res := owner.put(base, "src/new.txt", []byte("new\n"), nil); res.StatusCode >= 300 {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	type sessionRow struct {
		ID    string   `json:"id"`
		Paths []string `json:"changedPaths"`
		Idle  int64    `json:"idleLeftMs"`
	}
	sessions := decode[[]sessionRow](t, root.get("/admin/sessions", jsonAccept))
	if len(sessions) != 1 || sessions[0].ID != s.ID || strings.Join(sessions[0].Paths, ",") != "src/new.txt" || sessions[0].Idle <= 0 {
		t.Fatalf("dashboard sessions: %+v", sessions)
	}
	type shellsJSON struct {
		Terminals []struct {
			ID      string `json:"id"`
			Here    bool   `json:"here"`
			Session string `json:"sessionId"`
		} `json:"terminals"`
		Slots struct {
			Instance int `json:"instance"`
		} `json:"slots"`
	}
	shells := decode[shellsJSON](t, root.get("/admin/terminals", jsonAccept))
	if len(shells.Terminals) != 1 || shells.Terminals[0].ID != term.ID || !shells.Terminals[0].Here || shells.Slots.Instance != 1 {
		t.Fatalf("dashboard terminals: %+v", shells)
	}
	if u := usageOf(t, h, id); u.Reserved == 0 {
		t.Fatalf("an open shell holds no sandbox time: %+v", u)
	}
	// The session page carries the project's warning too.
	setCounter(t, h, id, 0, h.cfg.SandboxCap*96/100)
	if w := owner.page(base).Find(".meter-warning"); w.AttrOr("data-mark", "") != "95" {
		t.Errorf("the session page of a project at 96 %%: warning %q", w.Text())
	}

	res = root.post("/admin/sessions/"+s.ID+"/end", nil, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("end: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, owner.get(base, jsonAccept), http.StatusGone, "admin")
	page := owner.get(base, nil)
	if body := readBody(page); page.StatusCode != http.StatusGone || !strings.Contains(body, "a site admin ended it") {
		t.Errorf("the owner's page: %d %.300s", page.StatusCode, body)
	}
	waitClosed(t, h, term.ID, "the session's end by an admin")
	// The lease is closed once the shell has ended, which is when
	// waitClosed returns: a moment after it, by the goroutine that saw it.
	wait.For(t, wait.Short, "the shell's lease to close", func() bool {
		lease, err := h.store.TerminalByID(t.Context(), term.ID)
		return err == nil && lease.State == models.TerminalClosed
	})
	wait.For(t, wait.Long, "the shell's time to settle", func() bool {
		u := usageOf(t, h, id)
		return u.Reserved == 0 && u.Used > h.cfg.SandboxCap*96/100 // the shell's charge added
	})
	evs, err := h.store.EventsOf(t.Context(), id, events.SessionClosed)
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"reason": "admin"`) && !strings.Contains(string(evs[0].Data), `"reason":"admin"`) {
		t.Fatalf("closed events: %+v %v", evs, err)
	}
	rootUser, _ := h.store.UserByName(t.Context(), "root")
	if evs[0].ActorID == nil || *evs[0].ActorID != rootUser.ID {
		t.Errorf("the event's actor is %v, want the admin %d", evs[0].ActorID, rootUser.ID)
	}
	if feed := root.fragment("/admin?part=feed").Find(`li[data-type="code.session.closed"]`).Text(); !strings.Contains(feed, "root ended") || !strings.Contains(feed, "edit session as a site admin") {
		t.Errorf("the feed reads %q", feed)
	}
	if n := len(decode[[]sessionRow](t, root.get("/admin/sessions", jsonAccept))); n != 0 {
		t.Errorf("the dashboard still lists %d sessions", n)
	}
	if shells := decode[shellsJSON](t, root.get("/admin/terminals", jsonAccept)); len(shells.Terminals) != 0 || shells.Slots.Instance != 0 {
		t.Errorf("the dashboard still lists shells: %+v", shells)
	}
	// Ending it again says it has ended, and why.
	expectProblem(t, root.post("/admin/sessions/"+s.ID+"/end", nil, jsonAccept), http.StatusGone, "admin")
	expectProblem(t, root.post("/admin/sessions/edit_"+strings.Repeat("0", 32)+"/end", nil, jsonAccept), http.StatusNotFound, "not_found")
}

// "Close" on the dashboard closes someone's shell, and its time settles;
// the session stays open.
func TestDashboardClosesShell(t *testing.T) {
	needRoot(t)
	dashboardClosesShell(t, newHarness(t))
}

func TestDashboardClosesShellInAPod(t *testing.T) {
	needRoot(t)
	dashboardClosesShell(t, newHarness(t, onKube(t)))
}

func dashboardClosesShell(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	root := h.user("root", true)
	s, base := owner.session(id)
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	frag := root.fragmentPost("/admin/terminals/"+term.ID+"/close", nil)
	waitClosed(t, h, term.ID, "the admin's close")
	if frag.Find("#shell-"+term.ID).Length() != 0 {
		t.Errorf("the refreshed list still shows the closed shell")
	}
	wait.For(t, wait.Long, "the shell's time to settle", func() bool { return usageOf(t, h, id).Reserved == 0 })
	if cs, _ := h.store.SessionByID(t.Context(), s.ID); cs.State != models.SessionOpen {
		t.Errorf("closing a shell ended the session: %s", cs.State)
	}
	expectProblem(t, root.post("/admin/terminals/"+term.ID+"/close", nil, jsonAccept), http.StatusNotFound, "not_found")
}

// A browser that opens the raw event stream lands on the dashboard's
// readable feed; a script asking for the stream still gets it.
func TestRawEventsSendBrowsersToTheFeed(t *testing.T) {
	h := newHarness(t)
	root := h.user("root", true)
	res := root.get("/admin/events", header{"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"})
	readBody(res)
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/admin#") {
		t.Fatalf("a browser on /admin/events: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	for _, accept := range []string{"text/event-stream", "*/*", ""} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/admin/events", nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		res, err := root.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("Accept %q: %d %s", accept, res.StatusCode, res.Header.Get("Content-Type"))
		}
		cancel()
		res.Body.Close()
	}
}

// A Change waiting for approval shows on the dashboard with why it waits,
// the live stream says when the list moves, and once released it is gone.
func TestDashboardShowsWaitingChanges(t *testing.T) {
	h := newHarness(t)
	runPipeline(t, h)
	owner, id := editable(t, h)
	root := h.user("root", true)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	live, status := followDashboard(ctx, t, root, tr)
	if live == nil {
		t.Fatalf("dashboard stream: %d", status)
	}

	cid := owner.editFile(id, "README.md", "# Waiting\n")
	owner.waitChange(id, cid, models.ChangeComposed)
	wait.For(t, wait.Short, "a changes hint after the submit", func() bool { return live.count(events.TopicChanges) > 0 })
	part := readBody(root.get("/admin?part=changes", nil))
	row := fmt.Sprintf(`data-change="%d" data-status="composed"`, cid)
	if !strings.Contains(part, row) || !strings.Contains(part, "for an owner's approval") || !strings.Contains(part, "edit README.md") {
		t.Fatalf("the waiting change is not listed with its reason:\n%s", part)
	}

	before := live.count(events.TopicChanges)
	owner.approveAndRelease(id, cid)
	wait.For(t, wait.Short, "a changes hint after the release", func() bool { return live.count(events.TopicChanges) > before })
	if part := readBody(root.get("/admin?part=changes", nil)); strings.Contains(part, fmt.Sprintf(`data-change="%d"`, cid)) {
		t.Fatalf("a released change still waits on the dashboard:\n%s", part)
	}
}
