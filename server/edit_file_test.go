package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// "Edit this file" on the Code page is a form that opens the person's edit
// session (or finds the open one) and sends the browser to its workbench
// at that file; a path that could never be in the tree is refused before
// any session opens, and members, who read but do not edit, get no form.
func TestEditThisFileOpensTheWorkbench(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	molly := h.user("molly", false)
	owner.addMember(id, "molly", "member")
	pp := "/projects/" + itoa(id)

	form := owner.page(pp + "/code?path=" + url.QueryEscape("src/main.go")).Find("#viewer form.edit-file")
	if form.Length() != 1 || form.AttrOr("method", "") != "post" || form.AttrOr("action", "") != pp+"/sessions" {
		t.Fatalf("the viewer's Edit this file is %d forms to %q", form.Length(), form.AttrOr("action", ""))
	}
	fields := url.Values{}
	form.Find("input").Each(func(_ int, in *goquery.Selection) { fields.Set(in.AttrOr("name", ""), in.AttrOr("value", "")) })
	if fields.Get("path") != "src/main.go" || fields.Get("csrf_token") == "" {
		t.Fatalf("the form sends %v", fields)
	}
	// As the browser posts it: the form's own fields, nothing else.
	res := owner.postRaw(pp+"/sessions", fields)
	where := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(where, pp+"/sessions/edit_") || !strings.HasSuffix(where, "?path=src%2Fmain.go") {
		t.Fatalf("Edit this file answers %d to %q, want the workbench at src/main.go", res.StatusCode, where)
	}
	session := strings.TrimSuffix(where, "?path=src%2Fmain.go")
	if open := owner.page(where).Find("#session").AttrOr("data-open-path", ""); open != "src/main.go" {
		t.Fatalf("the workbench opens %q", open)
	}
	// The same session, at another file.
	fields.Set("path", "README.md")
	if again := owner.postRaw(pp+"/sessions", fields).Header.Get("Location"); again != session+"?path=README.md" {
		t.Fatalf("a second Edit this file goes to %q, want %q", again, session+"?path=README.md")
	}

	fields.Set("path", "../etc/passwd")
	expectProblem(t, owner.post(pp+"/sessions", fields, jsonAccept), http.StatusBadRequest, "bad_path")

	if n := molly.page(pp + "/code?path=README.md").Find(".edit-file").Length(); n != 0 {
		t.Fatalf("a member is offered %d Edit this file", n)
	}
	expectProblem(t, molly.post(pp+"/sessions", url.Values{"path": {"README.md"}}, jsonAccept), http.StatusForbidden, "forbidden")
}
