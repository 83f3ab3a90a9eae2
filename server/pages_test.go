package server

import (
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
// forbiddenUnless is 200 for those who may, else 403.
func forbiddenUnless(may bool) int {
	if may {
		return http.StatusOK
	}
	return http.StatusForbidden
}

type pageUser struct {
	name  string
	c     *client
	role  string // in the project: owner, admin or member
	admin bool   // a site admin
	edits bool   // may open an edit session
	base  string // their own session's URL, or the owner's when they may not edit
}

// Every page route renders, for an owner and for members, on a Container
// project with imported code and on a Local git project, as a page and as
// an htmx fragment: a broken template answers 500 here, not in front of a
// person.
func TestPageRoutes(t *testing.T) {
	h := newHarness(t)
	ann := h.user("ann", false)     // owns the Container project
	root := h.user("root", true)    // a site admin; owns the Local project
	eve := h.user("eve", false)     // project admin of both
	molly := h.user("molly", false) // member of both

	container := ann.createProject("container")
	if res := ann.upload(container, "code.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: "# Hello\n"},
		{name: "src/main.go", body: "package main\n\nfunc main() {}\n"},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}

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
	// A Change in each project, from the Code page's "Edit this file".
	changeOf := map[int64]string{}
	for _, p := range projects {
		changeOf[p.id] = "/projects/" + itoa(p.id) + "/changes/" + itoa(p.users[0].c.editFromPage(p.id, "README.md", "# Changed\n"))
	}

	anon := h.anonymous()
	for _, mode := range []string{"page", "htmx"} {
		hdr := header(nil)
		if mode == "htmx" {
			hdr = header{"HX-Request": "true"}
		}
		if res := anon.get("/login", hdr); res.StatusCode != http.StatusOK {
			t.Errorf("anonymous /login (%s): %d", mode, res.StatusCode)
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
			siteAdmin := http.StatusForbidden
			dashboard := http.StatusNotFound // hidden from everyone else
			if u.admin {
				siteAdmin = http.StatusOK
				dashboard = http.StatusOK
			}
			routes := []struct {
				path string
				want int
				html bool // answers HTML (a page or a fragment)
			}{
				{"/login", http.StatusSeeOther, false},
				{"/projects", http.StatusOK, true},
				{"/projects/new", http.StatusOK, true},
				{pp, http.StatusOK, true},
				{pp + "/remotes", http.StatusOK, true},
				{pp + "/code", http.StatusOK, true},
				{pp + "/code?path=README.md", http.StatusOK, true},
				{pp + "/code?path=src/main.go", http.StatusOK, true},
				{pp + "/code?path=missing.txt", http.StatusNotFound, true},
				{pp + "/code/tree", http.StatusOK, true},
				{pp + "/code/tree?path=src", http.StatusOK, true},
				{pp + "/code/file?path=README.md", http.StatusOK, true},
				{pp + "/code/file?path=../x", http.StatusBadRequest, true},
				{pp + "/code/raw?path=README.md", http.StatusOK, false},
				{pp + "/code/find?q=smg", http.StatusOK, true},
				{u.base, editor(http.StatusOK), true},
				{u.base + "?path=README.md", editor(http.StatusOK), true},
				{u.base + "/tree", editor(http.StatusOK), true},
				{u.base + "/tree?path=src", editor(http.StatusOK), true},
				{u.base + "/file?path=README.md", editor(http.StatusOK), false},
				{u.base + "/changes", editor(http.StatusOK), true},
				{u.base + "/diff?path=README.md", editor(http.StatusOK), false}, // text for a page, a fragment for htmx
				{u.base + "/commands", editor(http.StatusOK), true},
				{u.base + "/terminals", editor(http.StatusOK), false},
				{pp + "/changes", http.StatusOK, true},
				{changeOf[p.id], http.StatusOK, true},
				{changeOf[p.id] + "?view=split", http.StatusOK, true},
				{changeOf[p.id] + "/status", http.StatusOK, true},
				{pp + "/changes/999999", http.StatusNotFound, true},
				{pp + "/settings", http.StatusOK, true},
				{pp + "/code/edit?path=README.md", forbiddenUnless(u.edits), true},
				{"/admin/users", siteAdmin, siteAdmin == http.StatusOK},
				{"/admin", dashboard, dashboard == http.StatusOK},
				{"/admin?part=meters&q=" + p.kind + "&sort=use", dashboard, dashboard == http.StatusOK},
				{"/admin?part=sessions", dashboard, dashboard == http.StatusOK},
				{"/admin?part=terminals", dashboard, dashboard == http.StatusOK},
				{"/admin?part=commands", dashboard, dashboard == http.StatusOK},
				{"/admin?part=feed", dashboard, dashboard == http.StatusOK},
				{"/admin?part=nothing", http.StatusNotFound, true},
				{"/admin/meters", dashboard, false},
				{"/admin/meters.csv", dashboard, false},
				{"/admin/sessions", dashboard, false},
				{"/admin/terminals", dashboard, false},
				{"/projects/999999", http.StatusNotFound, true},
				{"/no-such-page", http.StatusNotFound, true},
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
				}
			}
		}
	}
}
