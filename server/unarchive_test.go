package server

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// A project admin archives the owner's project while the owner edits: the
// session is paused, not ended (its edits stay, no limit ends it, it takes
// no change), and once the owner or a site admin unarchives the project it
// goes on with its edits. The project admin cannot undo their archive.
func TestArchivePausesSessions(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	admin := h.user("admin", false)
	member := h.user("member", false)
	outsider := h.user("outsider", false)
	root := h.user("root", true)
	owner.addMember(id, "admin", "admin")
	owner.addMember(id, "member", "member")
	sess, base := owner.session(id)
	if res := owner.put(base, "README.md", []byte("# Mine\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d", res.StatusCode)
	}
	p := "/projects/" + itoa(id)
	if res := admin.post(p+"/archive", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("the admin archives: %d", res.StatusCode)
	}

	// Paused past both limits, the sweep included.
	h.clock.Advance(h.cfg.Sessions.MaxAge + h.cfg.Sessions.Idle)
	if _, err := h.app.EditSessions.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	doc := owner.page(base)
	if doc.Find(".notice.paused").Length() != 1 {
		t.Fatal("the session page does not say it is paused")
	}
	if body := readBody(owner.get(base+"/file?path=README.md", nil)); body != "# Mine\n" {
		t.Fatalf("the paused session reads %q", body)
	}
	expectProblem(t, owner.put(base, "README.md", []byte("# Lost\n"), nil), http.StatusConflict, "archived")
	expectProblem(t, owner.post(base+"/new-file", url.Values{"path": {"new.txt"}}, jsonAccept), http.StatusConflict, "archived")
	expectProblem(t, owner.post(base+"/commands", url.Values{"command": {"true"}}, jsonAccept), http.StatusConflict, "archived")
	expectProblem(t, owner.submit(base, "now"), http.StatusConflict, "archived")

	// Who may unarchive.
	expectProblem(t, admin.post(p+"/unarchive", nil, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, member.post(p+"/unarchive", nil, jsonAccept), http.StatusForbidden, "forbidden")
	expectProblem(t, outsider.post(p+"/unarchive", nil, jsonAccept), http.StatusNotFound, "not_found")
	if doc := owner.page(p); doc.Find("button#unarchive").Length() != 1 {
		t.Fatal("the owner's page of the archived project has no Unarchive button")
	}
	if doc := admin.page(p); doc.Find("button#unarchive").Length() != 0 {
		t.Fatal("the project admin's page offers Unarchive")
	}
	if res := owner.post(p+"/unarchive", nil); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != p {
		t.Fatalf("the owner unarchives: %d, Location %q", res.StatusCode, res.Header.Get("Location"))
	}

	// The same session goes on, with its edit and the age it had left.
	again, _ := owner.session(id)
	if again.ID != sess.ID {
		t.Fatalf("opening after the unarchive gave %s, not the paused %s", again.ID, sess.ID)
	}
	if body := readBody(owner.get(base+"/file?path=README.md", nil)); body != "# Mine\n" {
		t.Fatalf("after the unarchive the session reads %q", body)
	}
	if res := owner.put(base, "README.md", []byte("# Mine, again\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save after the unarchive: %d %s", res.StatusCode, readBody(res))
	}

	// A site admin, no member, unarchives too.
	if res := admin.post(p+"/archive", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("archive again: %d", res.StatusCode)
	}
	h.clock.Advance(time.Hour)
	if res := root.post(p+"/unarchive", nil, jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("a site admin unarchives: %d %s", res.StatusCode, readBody(res))
	}
	if body := readBody(owner.get(base+"/file?path=README.md", nil)); body != "# Mine, again\n" {
		t.Fatalf("after the second unarchive the session reads %q", body)
	}
}
