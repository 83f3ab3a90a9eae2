package server

import (
	"net/http"
	"strings"
	"testing"

	"atelier/models"
)

// Where a project has two or more owners and admins, a Change is approved
// by someone other than its author; a sole owner approves their own.
func TestApprovalNeedsAnotherPerson(t *testing.T) {
	h := newHarness(t)
	runPipeline(t, h)
	owner, id := editable(t, h)

	alone := owner.editFile(id, "README.md", "# Alone\n")
	owner.waitChange(id, alone, models.ChangeComposed)
	if res := owner.act(id, alone, "approve"); res.StatusCode != http.StatusOK {
		t.Fatalf("the sole owner approves their change: %d %s", res.StatusCode, readBody(res))
	}

	eve := h.user("eve", false)
	owner.addMember(id, "eve", "admin")
	mine := owner.editFile(id, "src/old.txt", "mine\n")
	owner.waitChange(id, mine, models.ChangeComposed)
	page := "/projects/" + itoa(id) + "/changes/" + itoa(mine)
	if doc := owner.page(page); doc.Find("button#approve").Length() != 0 ||
		!strings.Contains(doc.Find(".change-status .notice").Text(), "another owner or admin than you") {
		t.Fatal("the author's page offers Approve, or does not say who approves")
	}
	if doc := eve.page(page); doc.Find("button#approve").Length() != 1 {
		t.Fatal("the other admin's page has no Approve")
	}
	expectProblem(t, owner.act(id, mine, "approve"), http.StatusForbidden, "own_change")
	if ch := owner.change(id, mine); ch.Status != models.ChangeComposed || len(ch.Evidence) != 0 {
		t.Fatalf("the refused approval left %+v", ch)
	}
	if res := eve.act(id, mine, "approve"); res.StatusCode != http.StatusOK {
		t.Fatalf("eve approves the owner's change: %d %s", res.StatusCode, readBody(res))
	}
	if ch := owner.change(id, mine); ch.Status != models.ChangeVerified {
		t.Fatalf("after eve's approval: %s", ch.Status)
	}
}
