package server

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"atelier/models"
)

// projectJSON is GET /projects/{id} for JSON clients.
type projectJSON struct {
	Project models.Project         `json:"project"`
	Role    string                 `json:"role"`
	Members []models.ProjectMember `json:"members"`
	Invited []models.InvitedOwner  `json:"invited"`
}

func (c *client) projectPage(id int64) projectJSON {
	c.h.t.Helper()
	res := c.get("/projects/"+itoa(id), jsonAccept)
	if res.StatusCode != http.StatusOK {
		c.h.t.Fatalf("project %d: %d %s", id, res.StatusCode, readBody(res))
	}
	return decode[projectJSON](c.h.t, res)
}

// offerOwnership offers username the ownership of project id: 202.
func (c *client) offerOwnership(id int64, username string) {
	c.h.t.Helper()
	res := c.post("/projects/"+itoa(id)+"/members", url.Values{"username": {username}, "role": {"owner"}}, jsonAccept)
	if res.StatusCode != http.StatusAccepted {
		c.h.t.Fatalf("offer %s the ownership of %d: %d %s", username, id, res.StatusCode, readBody(res))
	}
}

func (c *client) answer(id int64, answer string) *http.Response {
	return c.post("/projects/"+itoa(id)+"/invitation/"+answer, nil, jsonAccept)
}

// eve offers carol the ownership of each of her projects. Nothing changes
// until carol answers; her bound on projects is hers alone (she still
// creates as many as she may, accepted or not); and eve, who leaves the
// projects she gave away, does not get her places back, so nobody's
// bound can be filled or emptied by anyone else.
func TestOwnershipIsAnInvitation(t *testing.T) {
	const bound = 3
	h := newHarness(t, func(c *Config) { c.MaxProjects = bound })
	eve := h.user("eve", false)
	carol := h.user("carol", false)
	var eves []int64
	for i := range bound {
		eves = append(eves, eve.createProject("eve's "+strconv.Itoa(i)))
	}
	for _, id := range eves {
		eve.offerOwnership(id, "carol")
		// carol is offered the role, not given it.
		expectProblem(t, carol.get("/projects/"+itoa(id), jsonAccept), http.StatusNotFound, "not_found")
		p := eve.projectPage(id)
		if len(p.Members) != 1 || p.Members[0].Username != "eve" || len(p.Invited) != 1 || p.Invited[0].Username != "carol" || p.Invited[0].InvitedBy != "eve" {
			t.Fatalf("project %d after the offer: members %+v, invited %+v", id, p.Members, p.Invited)
		}
	}
	// The offers wait on carol's projects page, each with its sentence and
	// its buttons.
	doc := carol.page("/projects")
	if n := doc.Find(".invitation").Length(); n != bound {
		t.Fatalf("carol's page shows %d invitations, want %d", n, bound)
	}
	first := doc.Find(".invitation").First()
	if text := strings.Join(strings.Fields(first.Text()), " "); !strings.Contains(text, "eve invites you to become an owner of eve's") ||
		first.Find("button.accept").Length() != 1 || first.Find("button.decline").Length() != 1 {
		t.Fatalf("an invitation reads %q", text)
	}

	// carol's bound is untouched by the offers and by accepting them.
	if res := carol.answer(eves[0], "accept"); res.StatusCode != http.StatusNoContent {
		t.Fatalf("accept: %d %s", res.StatusCode, readBody(res))
	}
	for i := range bound {
		carol.createProject("carol's " + strconv.Itoa(i))
	}
	expectProblem(t, carol.post("/projects", url.Values{"name": {"one more"}}, jsonAccept), http.StatusForbidden, "too_many_projects")
	if res := carol.answer(eves[1], "accept"); res.StatusCode != http.StatusNoContent {
		t.Fatalf("accept at the bound: %d %s", res.StatusCode, readBody(res))
	}
	if res := carol.answer(eves[2], "decline"); res.StatusCode != http.StatusNoContent {
		t.Fatalf("decline: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, carol.answer(eves[2], "accept"), http.StatusNotFound, "no_invitation")
	expectProblem(t, carol.get("/projects/"+itoa(eves[2]), jsonAccept), http.StatusNotFound, "not_found")
	for _, id := range eves[:2] {
		if p := carol.projectPage(id); p.Role != "owner" {
			t.Fatalf("carol is %q of %d after accepting", p.Role, id)
		}
	}

	// eve gives two projects away and leaves them: her rights go, her
	// places do not come back.
	for _, id := range eves[:2] {
		if res := eve.post("/projects/"+itoa(id)+"/leave", nil, jsonAccept); res.StatusCode != http.StatusOK {
			t.Fatalf("eve leaves %d: %d %s", id, res.StatusCode, readBody(res))
		}
		expectProblem(t, eve.get("/projects/"+itoa(id), jsonAccept), http.StatusNotFound, "not_found")
		if p := carol.projectPage(id); p.Role != "owner" || len(p.Members) != 1 {
			t.Fatalf("after eve left %d: %+v", id, p)
		}
	}
	expectProblem(t, eve.post("/projects", url.Values{"name": {"again"}}, jsonAccept), http.StatusForbidden, "too_many_projects")

	// carol may leave what she accepted, the last owner as she is: with no
	// admin, the project is archived.
	res := carol.post("/projects/"+itoa(eves[0])+"/leave", nil, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("carol leaves: %d %s", res.StatusCode, readBody(res))
	}
	if d := decode[struct {
		Heir     string `json:"heir"`
		Archived bool   `json:"archived"`
	}](t, res); d.Heir != "" || !d.Archived {
		t.Fatalf("the last owner left: %+v", d)
	}
}

// Anyone leaves from the project page; the last owner's project passes to
// the admin who joined first, and with no admin it is archived, read by
// its members until a site admin brings it back from the dashboard.
func TestLeaveProject(t *testing.T) {
	h := newHarness(t)
	ann := h.user("ann", false)
	bob := h.user("bob", false)
	cat := h.user("cat", false)
	dan := h.user("dan", false)
	root := h.user("root", true)
	id := ann.createProject("shared")
	ann.addMember(id, "bob", "admin")
	ann.addMember(id, "cat", "admin")
	ann.addMember(id, "dan", "member")
	p := "/projects/" + itoa(id)

	leave := func(c *client, who, heir string, archived bool) {
		t.Helper()
		if c.page(p).Find("button#leave").Length() != 1 {
			t.Fatalf("%s's project page has no Leave button", who)
		}
		// As the page's button sends it (htmx, the CSRF header).
		res := c.post(p+"/leave", nil, header{"HX-Request": "true", "X-CSRF-Token": c.csrf})
		if res.StatusCode != http.StatusNoContent || res.Header.Get("HX-Redirect") != "/projects" {
			t.Fatalf("%s leaves: %d, HX-Redirect %q", who, res.StatusCode, res.Header.Get("HX-Redirect"))
		}
		expectProblem(t, c.get(p, jsonAccept), http.StatusNotFound, "not_found")
		if heir != "" {
			if got := memberRoles(t, h, id)[heir]; got != "owner" {
				t.Fatalf("after %s left, %s is %q, want owner", who, heir, got)
			}
		}
		pr, err := h.store.ProjectByID(context.Background(), id)
		if err != nil || pr.Archived() != archived {
			t.Fatalf("after %s left the project is archived: %v (%v), want %v", who, pr.Archived(), err, archived)
		}
	}
	// A member leaves; the last owner leaves twice over.
	leave(dan, "dan", "", false)
	ann.addMember(id, "dan", "member")
	dan.loadCSRF("/projects")
	leave(ann, "ann", "bob", false)
	leave(bob, "bob", "cat", false)
	leave(cat, "cat", "", true)
	if roles := memberRoles(t, h, id); len(roles) != 1 || roles["dan"] != "member" {
		t.Fatalf("left in the project: %v", roles)
	}
	if doc := dan.page(p); doc.Find(".archived-note").Length() != 1 {
		t.Fatal("the archived project's page does not say so to its member")
	}
	expectProblem(t, dan.post(p+"/unarchive", nil, jsonAccept), http.StatusForbidden, "forbidden")

	// The dashboard lists it as having no owner; a site admin, no member,
	// brings it back from there.
	row := root.page("/admin").Find(`.archived-projects tr[data-project="` + itoa(id) + `"]`)
	if row.Length() != 1 || !strings.Contains(row.Text(), "its last owner left") {
		t.Fatalf("the dashboard's archived projects: %q", row.Text())
	}
	action, _ := row.Find("form").Attr("action")
	res := root.post(action, nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin" {
		t.Fatalf("unarchive from the dashboard: %d, Location %q", res.StatusCode, res.Header.Get("Location"))
	}
	if pr, _ := h.store.ProjectByID(context.Background(), id); pr.Archived() {
		t.Fatal("still archived")
	}
}

func memberRoles(t *testing.T, h *harness, id int64) map[string]string {
	t.Helper()
	ms, err := h.store.Members(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, m := range ms {
		roles[m.Username] = m.Role
	}
	return roles
}
