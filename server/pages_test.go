package server

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"atelier/events"
	"atelier/models"
)

// Whatever a sign-in link carries as next, the person lands on this site:
// the values browsers read as another origin go to /projects, on the form's
// post and when someone already signed in follows the link.
func TestLoginNextStaysLocal(t *testing.T) {
	h := newHarness(t)
	ann := h.user("ann", false)
	if _, err := h.app.Auth.CreateUser(t.Context(), "bob", "password-bob", false); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ next, want string }{
		{"//evil.example", "/projects"},
		{`/\evil.example`, "/projects"},
		{"/%09/evil.example", "/projects"},
		{"/\t/evil.example", "/projects"},
		{"/%2F%2Fevil.example", "/projects"},
		{"https://evil.example", "/projects"},
		{"javascript:alert(1)", "/projects"},
		{"/projects/3/code?path=a%20b", "/projects/3/code?path=a%20b"},
	}
	for _, tc := range cases {
		// The link as a page writes it (next arrives exactly as given), and
		// as an attacker types it (next arrives decoded once).
		links := []string{"/login?" + url.Values{"next": {tc.next}}.Encode()}
		if tc.want == "/projects" && !strings.Contains(tc.next, "\t") {
			links = append(links, "/login?next="+tc.next)
		}
		for _, link := range links {
			res := ann.get(link, nil)
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != tc.want {
				t.Errorf("GET %s signed in: %d Location %q, want %q", link, res.StatusCode, res.Header.Get("Location"), tc.want)
			}
		}
		bob := h.anonymous()
		form := bob.page(links[0]).Find(`form input[name=next]`).AttrOr("value", "")
		if form != tc.want {
			t.Errorf("the form for next=%q carries %q, want %q", tc.next, form, tc.want)
		}
		res := bob.post("/login", url.Values{"username": {"bob"}, "password": {"password-bob"}, "next": {tc.next}})
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != tc.want {
			t.Errorf("POST /login next=%q: %d Location %q, want %q", tc.next, res.StatusCode, res.Header.Get("Location"), tc.want)
		}
	}
}

// pageUser is one person the page table renders as.
type pageUser struct {
	name  string
	c     *client
	role  string // in the project: owner, admin or member
	admin bool   // a site admin
	edits bool   // may open an edit session
	base  string // their own session's URL, or the owner's when they may not edit
}

// Every page route renders, for an owner and for members, on a Container
// project with imported code (with an offer of ownership pending), on an
// archived one whose sessions are paused and on a Local git project, as a
// page and as an htmx fragment: a broken template answers 500 here, not in
// front of a person. Every event the projects' history recorded shows on
// the Change pages and the dashboard, and no page prints internals (see
// printsInternals).
func TestPageRoutes(t *testing.T) {
	needRoot(t) // the checks and commands of the history run in the sandbox
	h := newHarness(t)
	runPipeline(t, h)
	ann := h.user("ann", false)     // owns the Container project
	root := h.user("root", true)    // a site admin; owns the Local project
	eve := h.user("eve", false)     // project admin of both
	molly := h.user("molly", false) // member of both

	withCode := func(name string) int64 {
		id := ann.createProject(name)
		if res := ann.upload(id, "code.tar.gz", tarGz(t, []entry{
			{name: "README.md", body: "# Hello\n"},
			{name: "src/main.go", body: "package main\n\nfunc main() {}\n"},
		}), jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
		}
		return id
	}
	container := withCode("container")
	// Archived once its sessions and a Change exist: the sessions are
	// paused, read-only.
	archived := withCode("archived")

	folder := filepath.Join(t.TempDir(), "local")
	if err := os.MkdirAll(filepath.Join(folder, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(folder, "README.md"), []byte("# Local\n"), 0o644)
	os.WriteFile(filepath.Join(folder, "src", "main.go"), []byte("package main\n"), 0o644)
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", folder},
		{"-C", folder, "remote", "add", "origin", "https://git.example.com/team/local.git"},
		{"-C", folder, "add", "."},
		{"-C", folder, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "start"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	res := root.post("/projects", url.Values{"name": {"local"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create the Local project as a site admin: %d %s", res.StatusCode, readBody(res))
	}
	local := decode[models.Project](t, res).ID

	projects := []struct {
		kind  string
		id    int64
		users []*pageUser
	}{
		{"container", container, []*pageUser{
			{name: "ann", c: ann, role: "owner", edits: true},
			{name: "eve", c: eve, role: "admin", edits: true},
			{name: "molly", c: molly, role: "member"},
		}},
		{"archived", archived, []*pageUser{
			{name: "ann", c: ann, role: "owner", edits: true},
			{name: "eve", c: eve, role: "admin", edits: true},
			{name: "molly", c: molly, role: "member"},
		}},
		{"local", local, []*pageUser{
			{name: "root", c: root, role: "owner", admin: true, edits: true},
			{name: "eve", c: eve, role: "admin", edits: true},
			{name: "molly", c: molly, role: "member"},
		}},
	}
	for _, p := range projects {
		owner := p.users[0]
		for _, u := range p.users[1:] {
			owner.c.addMember(p.id, u.name, u.role)
		}
	}
	told := history(t, h, ann, eve, container, archived)
	for _, p := range projects {
		owner := p.users[0]
		for _, u := range p.users {
			if u.edits {
				_, u.base = u.c.session(p.id)
			}
		}
		for _, u := range p.users {
			if !u.edits {
				u.base = owner.base // someone else's session: not found
			}
		}
	}
	// A Change in each project, a one-file Change as a script makes it.
	changeOf := map[int64]string{}
	for _, p := range projects {
		changeOf[p.id] = "/projects/" + itoa(p.id) + "/changes/" + itoa(p.users[0].c.editFile(p.id, "README.md", "# Changed\n"))
	}
	// The owner's shell in each project that runs them, shared with molly
	// to watch.
	watchOf := map[int64]string{}
	sharedRecordingOf, privateRecordingOf := map[int64]string{}, map[int64]string{}
	for _, p := range projects {
		if p.id == archived {
			continue
		}
		owner := p.users[0]
		term, res := owner.c.openTerminal(owner.base)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("%s: terminal: %d %s", p.kind, res.StatusCode, readBody(res))
		}
		shared := owner.base + "/terminals/" + term.ID
		if res := owner.c.post(shared+"/shares", url.Values{"username": {"molly"}}, jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("%s: share: %d %s", p.kind, res.StatusCode, readBody(res))
		}
		watchOf[p.id] = shared
		// Two recordings of it: the first shared with the project.
		var made []recordingJSON
		for range 2 {
			if res := owner.c.post(shared+"/recording", nil, jsonAccept); res.StatusCode != http.StatusOK {
				t.Fatalf("%s: record: %d %s", p.kind, res.StatusCode, readBody(res))
			}
			made = decode[[]recordingJSON](t, owner.c.del(shared+"/recording", jsonAccept))
		}
		if len(made) != 2 {
			t.Fatalf("%s: recordings %+v", p.kind, made)
		}
		rec := "/projects/" + itoa(p.id) + "/recordings/"
		sharedRecordingOf[p.id], privateRecordingOf[p.id] = rec+itoa(made[1].ID), rec+itoa(made[0].ID)
		if res := owner.c.post(sharedRecordingOf[p.id]+"/share", url.Values{"shared": {"true"}}, jsonAccept); res.StatusCode != http.StatusNoContent {
			t.Fatalf("%s: share the recording: %d %s", p.kind, res.StatusCode, readBody(res))
		}
	}
	if res := eve.post("/projects/"+itoa(archived)+"/archive", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("archive: %d", res.StatusCode)
	}
	// An offer of ownership waits on molly's projects page and in the
	// container project's members panel.
	ann.offerOwnership(container, "molly")

	internal := recordedTypes(t, h)
	anon := h.anonymous()
	for _, mode := range []string{"page", "htmx"} {
		hdr := header(nil)
		if mode == "htmx" {
			hdr = header{"HX-Request": "true"}
		}
		if res := anon.get("/login", hdr); res.StatusCode != http.StatusOK {
			t.Errorf("anonymous /login (%s): %d", mode, res.StatusCode)
		} else if what := printsInternals(readBody(res), internal); what != "" {
			t.Errorf("anonymous /login (%s) prints %s", mode, what)
		}
		if res := anon.get("/projects/"+itoa(container)+"/code", hdr); res.StatusCode != http.StatusSeeOther && res.StatusCode != http.StatusNoContent {
			t.Errorf("anonymous code page (%s): %d", mode, res.StatusCode)
		}
	}

	for _, p := range projects {
		pp := "/projects/" + itoa(p.id)
		for _, u := range p.users {
			editor := func(yes int) int {
				if u.edits {
					return yes
				}
				return http.StatusNotFound // a session of someone else is not found
			}
			siteAdmin := http.StatusNotFound // hidden from everyone else
			dashboard := http.StatusNotFound
			if u.admin {
				siteAdmin = http.StatusOK
				dashboard = http.StatusOK
			}
			routes := []struct {
				path string
				want int
				html bool // answers HTML (a page or a fragment)
				// tab is the project tab the page shows as its own, or
				// "below" for a page under one (a Change, a session); a
				// page of the project shows all four tabs.
				tab string
			}{
				{"/login", http.StatusSeeOther, false, ""},
				{"/projects", http.StatusOK, true, ""},
				{"/account", http.StatusOK, true, ""},
				{"/password-reset?token=made-up", http.StatusGone, true, ""},
				{"/projects/new", http.StatusOK, true, ""},
				{pp, http.StatusOK, true, "Overview"},
				{pp + "/remotes", http.StatusOK, true, ""},
				{pp + "/code", http.StatusOK, true, "Code"},
				{pp + "/code?path=README.md", http.StatusOK, true, "Code"},
				{pp + "/code?path=src/main.go", http.StatusOK, true, "Code"},
				{pp + "/code?path=missing.txt", http.StatusNotFound, true, ""},
				{pp + "/code/tree", http.StatusOK, true, ""},
				{pp + "/code/tree?path=src", http.StatusOK, true, ""},
				{pp + "/code/file?path=README.md", http.StatusOK, true, ""},
				{pp + "/code/file?path=../x", http.StatusBadRequest, true, ""},
				{pp + "/code/raw?path=README.md", http.StatusOK, false, ""},
				{pp + "/code/find?q=smg", http.StatusOK, true, ""},
				{u.base, editor(http.StatusOK), true, "below"},
				{u.base + "?path=README.md", editor(http.StatusOK), true, "below"},
				{u.base + "/tree", editor(http.StatusOK), true, ""},
				{u.base + "/tree?path=src", editor(http.StatusOK), true, ""},
				{u.base + "/file?path=README.md", editor(http.StatusOK), false, ""},
				{u.base + "/changes", editor(http.StatusOK), true, ""},
				{u.base + "/diff?path=README.md", editor(http.StatusOK), false, ""}, // text for a page, a fragment for htmx
				{u.base + "/commands", editor(http.StatusOK), true, ""},
				{u.base + "/terminals", editor(http.StatusOK), false, ""},
				{pp + "/changes", http.StatusOK, true, "Changes"},
				{changeOf[p.id], http.StatusOK, true, "below"},
				{changeOf[p.id] + "?view=split", http.StatusOK, true, "below"},
				{changeOf[p.id] + "/status", http.StatusOK, true, ""},
				{pp + "/changes/999999", http.StatusNotFound, true, ""},
				{pp + "/settings", http.StatusOK, true, "Settings"},
				{pp + "/code/edit?path=README.md", http.StatusNotFound, true, ""}, // "Edit this file" opens the workbench
				{"/admin/users", siteAdmin, siteAdmin == http.StatusOK, ""},
				{"/admin", dashboard, dashboard == http.StatusOK, ""},
				{"/admin?part=meters&q=" + p.kind + "&sort=use", dashboard, dashboard == http.StatusOK, ""},
				{"/admin?part=sessions", dashboard, dashboard == http.StatusOK, ""},
				{"/admin?part=terminals", dashboard, dashboard == http.StatusOK, ""},
				{"/admin?part=commands", dashboard, dashboard == http.StatusOK, ""},
				{"/admin?part=feed", dashboard, dashboard == http.StatusOK, ""},
				{"/admin?part=nothing", http.StatusNotFound, true, ""},
				{"/admin/meters", dashboard, false, ""},
				{"/admin/meters.csv", dashboard, false, ""},
				{"/admin/sessions", dashboard, false, ""},
				{"/admin/terminals", dashboard, false, ""},
				{"/projects/999999", http.StatusNotFound, true, ""},
				{"/no-such-page", http.StatusNotFound, true, ""},
			}
			if rec := sharedRecordingOf[p.id]; rec != "" {
				private := http.StatusNotFound
				if u == p.users[0] {
					private = http.StatusOK
				}
				routes = append(routes, []struct {
					path string
					want int
					html bool
					tab  string
				}{
					{rec, http.StatusOK, true, "Code"},
					{rec + "/cast", http.StatusOK, false, ""},
					{privateRecordingOf[p.id], private, true, ""},
					{privateRecordingOf[p.id] + "/cast", private, false, ""},
					{u.base + "/recordings", editor(http.StatusOK), true, ""},
				}...)
			}
			if shared := watchOf[p.id]; shared != "" {
				watch, shares := http.StatusNotFound, http.StatusNotFound
				switch u {
				case p.users[0]:
					shares = http.StatusOK
				case p.users[2]: // molly, who watches
					watch, shares = http.StatusOK, http.StatusForbidden
				}
				routes = append(routes, struct {
					path string
					want int
					html bool
					tab  string
				}{shared + "/watch", watch, true, "Code"}, struct {
					path string
					want int
					html bool
					tab  string
				}{shared + "/shares", shares, true, ""})
			}
			for _, change := range told[p.id] {
				routes = append(routes, struct {
					path string
					want int
					html bool
					tab  string
				}{change, http.StatusOK, true, "below"}, struct {
					path string
					want int
					html bool
					tab  string
				}{change + "/status", http.StatusOK, true, ""})
			}
			for _, r := range routes {
				for _, mode := range []string{"page", "htmx"} {
					hdr := header(nil)
					if mode == "htmx" {
						hdr = header{"HX-Request": "true"}
					}
					want := r.want
					if mode == "htmx" && want == http.StatusSeeOther {
						want = http.StatusNoContent // htmx follows HX-Redirect instead
					}
					res := u.c.get(r.path, hdr)
					body := readBody(res)
					where := p.kind + " " + u.name + " " + mode + " GET " + r.path
					if res.StatusCode >= 500 {
						t.Errorf("%s: %d %.300s", where, res.StatusCode, body)
						continue
					}
					if res.StatusCode != want {
						t.Errorf("%s: %d, want %d: %.300s", where, res.StatusCode, want, body)
						continue
					}
					if !r.html || want != http.StatusOK {
						continue
					}
					if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || strings.TrimSpace(body) == "" {
						t.Errorf("%s: %q with %d bytes", where, res.Header.Get("Content-Type"), len(body))
					}
					if what := printsInternals(body, internal); what != "" {
						t.Errorf("%s prints %s", where, what)
					}
					if r.tab != "" {
						checkProjectTabs(t, where, body, pp, r.tab)
					}
				}
			}
		}
	}
}

// history gives the projects what their pages have to tell, through the
// ways people make it: in the container project a session that ran
// commands (one in a folder, one failing) is submitted, passes its check
// and is released; a Change that fails its check is withdrawn; eve opens
// a session and discards it. In the archived one (no check command) a
// Change waits for an approval and eve approves it. What no short test
// makes happen (a Change superseded or composed again at its release,
// one waiting for a clean folder, sessions ended for each reason, a type
// this version does not know) is recorded beside them. It returns the
// Change pages per project.
func history(t *testing.T, h *harness, ann, eve *client, container, archived int64) map[int64][]string {
	t.Helper()
	changeURL := func(id, cid int64) string { return "/projects/" + itoa(id) + "/changes/" + itoa(cid) }
	told := map[int64][]string{}

	ann.setCheck(container, "test -f notes.txt")
	_, base := ann.session(container)
	if out, res := ann.run(base, "echo noted > notes.txt", ""); res.StatusCode != http.StatusOK || out.ExitCode != 0 {
		t.Fatalf("a command: %d %+v", res.StatusCode, out)
	}
	if out, res := ann.run(base, "ls missing", "src"); res.StatusCode != http.StatusOK || out.ExitCode == 0 {
		t.Fatalf("a failing command in src: %d %+v", res.StatusCode, out)
	}
	res := ann.submit(base, "Notes")
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", res.StatusCode, readBody(res))
	}
	submitted := decode[changeJSON](t, res).ChangeID
	failing := ann.editFile(container, "src/main.go", "package main\n\n// no notes here\nfunc main() {}\n")
	ann.waitChange(container, submitted, models.ChangeVerified)
	if res := ann.act(container, submitted, "release"); res.StatusCode != http.StatusOK {
		t.Fatalf("release: %d %s", res.StatusCode, readBody(res))
	}
	ann.waitChange(container, failing, models.ChangeFailed)
	if res := ann.act(container, failing, "withdraw"); res.StatusCode != http.StatusOK {
		t.Fatalf("withdraw: %d %s", res.StatusCode, readBody(res))
	}
	discarded, discardedURL := eve.session(container)
	if res := eve.post(discardedURL+"/discard", nil, jsonAccept); res.StatusCode >= 300 {
		t.Fatalf("discard: %d %s", res.StatusCode, readBody(res))
	}
	told[container] = []string{changeURL(container, submitted), changeURL(container, failing)}

	approved := ann.editFile(archived, "src/main.go", "package main\n\n// approved\nfunc main() {}\n")
	ann.waitChange(archived, approved, models.ChangeComposed)
	if res := eve.act(archived, approved, "approve"); res.StatusCode != http.StatusOK {
		t.Fatalf("approve: %d %s", res.StatusCode, readBody(res))
	}
	told[archived] = []string{changeURL(archived, approved)}

	annID, eveID := userID(t, h, "ann"), userID(t, h, "eve")
	rare := []struct {
		typ   string
		actor int64
		data  string
	}{
		{events.ChangeMoved, annID, `{"status": "superseded", "paths": ["README.md", "a", "b", "c"]}`},
		{events.ChangeMoved, annID, `{"status": "composed", "recomposed": true, "base": "` + strings.Repeat("a", 40) + `"}`},
		{events.ChangeWaiting, annID, `{"status": "verified", "reason": "dirty_worktree"}`},
		{"change.unheard_of", annID, `{"status": "who knows"}`},
	}
	for reason, actor := range map[string]int64{"idle": 0, "max_age": 0, "archived": annID, "project_deleted": annID,
		"admin": annID, "revoked": annID, "some_new_reason": eveID} {
		rare = append(rare, struct {
			typ   string
			actor int64
			data  string
		}{events.SessionClosed, actor, `{"session": "` + discarded.ID + `", "reason": "` + reason + `"}`})
	}
	for _, r := range rare {
		data := r.data
		if strings.HasPrefix(r.typ, "change.") {
			data = strings.Replace(data, "{", `{"changeId": `+itoa(submitted)+`, `, 1)
		}
		e := &models.Event{Type: r.typ, ProjectID: &container, Data: []byte(data)}
		if r.actor != 0 {
			e.ActorID = &r.actor
		}
		if err := h.store.AddEvent(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	return told
}

// recordedTypes is every type of event the server recorded, with every
// type this version knows: the names no page may print.
func recordedTypes(t *testing.T, h *harness) []string {
	t.Helper()
	es, err := h.store.RecentEvents(t.Context(), 100_000)
	if err != nil {
		t.Fatal(err)
	}
	types := []string{}
	for _, e := range es {
		types = append(types, e.Type)
	}
	return append(types, events.SessionOpened, events.SessionClosed, events.SessionSubmitted, events.ChangeComposed,
		events.ChangeVerified, events.ChangeFailed, events.ChangeReleased, events.ChangeWaiting, events.ChangeMoved,
		events.CodeImported)
}

var (
	// A JSON object with a member, or an array of objects, strings or
	// numbers, as a template prints a payload it was given raw.
	jsonText = regexp.MustCompile(`\{\s*"[^"\n]*"\s*:|\[\s*(\{|"[^"\n]*"\s*[,\]]|-?[0-9]+\s*,)`)
	// A timestamp as machines write it (2025-01-02T15:04:05.000Z).
	machineTime = regexp.MustCompile(`[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}`)
)

// printsInternals says what internal a page shows a person: JSON, an event's
// type, a machine's timestamp; "" when none. It reads the text a browser
// shows (scripts, styles and attributes are not read).
func printsInternals(body string, types []string) string {
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		return "unparseable HTML: " + err.Error()
	}
	doc.Find("script, style, template").Remove()
	text := doc.Text()
	if m := jsonText.FindStringIndex(text); m != nil {
		return fmt.Sprintf("JSON: %q", around(text, m[0]))
	}
	for _, typ := range types {
		if i := strings.Index(text, typ); i >= 0 {
			return fmt.Sprintf("the event type %s: %q", typ, around(text, i))
		}
	}
	if m := machineTime.FindStringIndex(text); m != nil {
		return fmt.Sprintf("a machine's timestamp: %q", around(text, m[0]))
	}
	return ""
}

func around(text string, i int) string {
	return text[max(i-60, 0):min(i+100, len(text))]
}

// checkProjectTabs fails unless the page of project pp shows the project's
// four tabs in order, each a link to its page but the one shown (own),
// and, on a page below a tab (own is "below"), the page itself after them.
func checkProjectTabs(t *testing.T, where, body, pp, own string) {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tabs := doc.Find("nav.tabs .tab")
	want := []struct{ name, href string }{{"Overview", pp}, {"Code", pp + "/code"}, {"Changes", pp + "/changes"}, {"Settings", pp + "/settings"}}
	if tabs.Length() < len(want) {
		t.Errorf("%s: the project tabs are %q, want Overview, Code, Changes, Settings", where, tabs.Text())
		return
	}
	for i, w := range want {
		tab := tabs.Eq(i)
		name := strings.TrimSpace(tab.Text())
		href, link := tab.Attr("href")
		switch {
		case name != w.name:
			t.Errorf("%s: tab %d is %q, want %q (tabs %q)", where, i+1, name, w.name, tabs.Text())
		case name == own && (link || !tab.HasClass("current")):
			t.Errorf("%s: the %s tab of its own page is a link (%q) or not marked current", where, name, href)
		case name != own && (!link || href != w.href):
			t.Errorf("%s: the %s tab links to %q, want %q", where, name, href, w.href)
		}
	}
	if own == "below" && (tabs.Length() != len(want)+1 || !tabs.Last().HasClass("current")) {
		t.Errorf("%s: no tab names the page itself after the project's four: %q", where, tabs.Text())
	}
}
