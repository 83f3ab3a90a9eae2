package projects_test

import (
	"context"
	"errors"
	"testing"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
)

// roleOf is who's role in the fixture's project, or "" for none.
func (f *fixture) roleOf(t *testing.T, who string) string {
	t.Helper()
	role, err := f.store.MemberRole(context.Background(), f.project.ID, f.people[who].ID)
	if errors.Is(err, models.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return role
}

// Ownership waits for its person's answer: an offer changes nothing until
// it is accepted, a declined one is gone, and an offer lapses when its
// author stops being an owner.
func TestOwnershipIsOffered(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	owner := f.access(t, "owner", auth.ProjectOwn)
	outsider := f.people["outsider"]

	if change, err := f.svc.SetMember(ctx, owner, "outsider", auth.RoleOwner); err != nil || change != projects.OwnerInvited {
		t.Fatalf("offering: %v, %v", change, err)
	}
	if got := f.roleOf(t, "outsider"); got != "" {
		t.Fatalf("an offer made the outsider %q", got)
	}
	if _, err := f.svc.Authorize(ctx, outsider, f.project.ID, auth.CodeRead); !errors.Is(err, projects.ErrNotFound) {
		t.Fatalf("before answering the outsider reads the project: %v", err)
	}
	invs, err := f.svc.Invitations(ctx, outsider)
	if err != nil || len(invs) != 1 || invs[0].ProjectID != f.project.ID || invs[0].ProjectName != "Matrix" || invs[0].InvitedBy != "owner" {
		t.Fatalf("the outsider's invitations: %+v, %v", invs, err)
	}
	if listed, err := f.svc.InvitationsOf(ctx, owner); err != nil || len(listed) != 1 || listed[0].Username != "outsider" {
		t.Fatalf("the project's invitations: %+v, %v", listed, err)
	}
	// Nobody answers for someone else: the invitation is the invitee's.
	if err := f.svc.AcceptInvitation(ctx, f.people["member"], f.project.ID); !errors.Is(err, projects.ErrNoInvitation) {
		t.Fatalf("another person accepts: %v", err)
	}

	if err := f.svc.DeclineInvitation(ctx, outsider, f.project.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AcceptInvitation(ctx, outsider, f.project.ID); !errors.Is(err, projects.ErrNoInvitation) {
		t.Fatalf("accepting a declined invitation: %v", err)
	}
	if got := f.roleOf(t, "outsider"); got != "" {
		t.Fatalf("declining made the outsider %q", got)
	}

	// A member offered ownership stays a member until they accept.
	if _, err := f.svc.SetMember(ctx, owner, "member", auth.RoleOwner); err != nil {
		t.Fatal(err)
	}
	if got := f.roleOf(t, "member"); got != models.RoleMember {
		t.Fatalf("an offer made the member %q", got)
	}
	if err := f.svc.AcceptInvitation(ctx, f.people["member"], f.project.ID); err != nil {
		t.Fatal(err)
	}
	if got := f.roleOf(t, "member"); got != models.RoleOwner {
		t.Fatalf("after accepting, the member is %q", got)
	}
	if _, err := f.svc.Authorize(ctx, f.people["member"], f.project.ID, auth.ProjectOwn); err != nil {
		t.Fatalf("the new owner may not own: %v", err)
	}

	// The new owner offers it on; the offer lapses when they step down,
	// and a withdrawn one is gone.
	second := f.access(t, "member", auth.ProjectOwn)
	if _, err := f.svc.SetMember(ctx, second, "outsider", auth.RoleOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetMember(ctx, owner, "member", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AcceptInvitation(ctx, outsider, f.project.ID); !errors.Is(err, projects.ErrNoInvitation) {
		t.Fatalf("an offer by someone no longer an owner was accepted: %v", err)
	}
	if _, err := f.svc.SetMember(ctx, owner, "outsider", auth.RoleOwner); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.WithdrawInvitation(ctx, f.access(t, "admin", auth.ProjectManage), "outsider"); !errors.Is(err, auth.ErrForbidden) {
		t.Fatalf("an admin withdraws an offer: %v", err)
	}
	if err := f.svc.WithdrawInvitation(ctx, owner, "outsider"); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AcceptInvitation(ctx, outsider, f.project.ID); !errors.Is(err, projects.ErrNoInvitation) {
		t.Fatalf("a withdrawn offer was accepted: %v", err)
	}
}

// Anyone may leave. The last owner's project passes to the admin who
// joined first, or, with no admin, is archived; the leaver's open session
// ends there, and their offers lapse.
func TestLeave(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.person(t, "admin2", false)
	owner := f.access(t, "owner", auth.ProjectOwn)
	if _, err := f.svc.SetMember(ctx, owner, "admin2", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}

	// A member leaves; leaving twice finds no project.
	if d, err := f.svc.Leave(ctx, f.people["member"], f.project.ID); err != nil || d != (projects.Departure{}) {
		t.Fatalf("the member leaves: %+v, %v", d, err)
	}
	if _, err := f.svc.Leave(ctx, f.people["member"], f.project.ID); !errors.Is(err, projects.ErrNotFound) {
		t.Fatalf("leaving twice: %v", err)
	}
	if _, err := f.svc.Leave(ctx, f.people["outsider"], f.project.ID); !errors.Is(err, projects.ErrNotFound) {
		t.Fatalf("an outsider leaves: %v", err)
	}

	// The last owner leaves with an open session and a pending offer: the
	// first admin owns the project, the session ended, the offer lapsed.
	sess, _, err := f.sessions.Open(ctx, f.access(t, "owner", auth.CodeEdit))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SetMember(ctx, owner, "outsider", auth.RoleOwner); err != nil {
		t.Fatal(err)
	}
	d, err := f.svc.Leave(ctx, f.people["owner"], f.project.ID)
	if err != nil || d.Heir != "admin" || d.Archived {
		t.Fatalf("the last owner leaves: %+v, %v", d, err)
	}
	if f.roleOf(t, "owner") != "" || f.roleOf(t, "admin") != models.RoleOwner || f.roleOf(t, "admin2") != models.RoleAdmin {
		t.Fatalf("after the owner left: owner %q, admin %q, admin2 %q", f.roleOf(t, "owner"), f.roleOf(t, "admin"), f.roleOf(t, "admin2"))
	}
	if cs, err := f.store.SessionByID(ctx, sess.ID); err != nil || cs.State == models.SessionOpen || cs.CloseReason == nil || *cs.CloseReason != "revoked" {
		t.Fatalf("the leaver's session: %+v, %v", cs, err)
	}
	if err := f.svc.AcceptInvitation(ctx, f.people["outsider"], f.project.ID); !errors.Is(err, projects.ErrNoInvitation) {
		t.Fatalf("the leaver's offer was accepted: %v", err)
	}

	// The heir leaves: admin2 takes it. admin2 leaves: nobody is left to
	// own it, so it is archived.
	if d, err := f.svc.Leave(ctx, f.people["admin"], f.project.ID); err != nil || d.Heir != "admin2" {
		t.Fatalf("the heir leaves: %+v, %v", d, err)
	}
	if d, err := f.svc.Leave(ctx, f.people["admin2"], f.project.ID); err != nil || d.Heir != "" || !d.Archived {
		t.Fatalf("the last one leaves: %+v, %v", d, err)
	}
	p, err := f.store.ProjectByID(ctx, f.project.ID)
	if err != nil || !p.Archived() {
		t.Fatalf("the ownerless project: %+v, %v", p, err)
	}
}

// The bound counts the projects a person created: ownership they accepted
// takes no place, and a project's creator is written once, so no write can
// move a project onto someone's count or off their own.
func TestBoundCountsCreations(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// The fixture's owner created one project; the member created none
	// and accepts the ownership of it.
	if _, err := f.svc.SetMember(ctx, f.access(t, "owner", auth.ProjectOwn), "member", auth.RoleOwner); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.AcceptInvitation(ctx, f.people["member"], f.project.ID); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	err := f.store.Tx(ctx, func(tx *models.Store) error {
		for _, who := range []string{"owner", "member"} {
			n, err := tx.CreatedProjectsLocked(ctx, f.people[who].ID)
			if err != nil {
				return err
			}
			counts[who] = n
		}
		return nil
	})
	if err != nil || counts["owner"] != 1 || counts["member"] != 0 {
		t.Fatalf("counts %v, %v; want the creator's 1 and none for who accepted", counts, err)
	}
	err = f.store.Exec(ctx, "UPDATE projects SET created_by = ? WHERE id = ?", f.people["member"].ID, f.project.ID)
	var ce *models.ConstraintError
	if !errors.As(err, &ce) || ce.Constraint != "projects_creator_fixed" || !errors.Is(err, models.ErrInvalid) {
		t.Fatalf("moving a project to another creator: %v", err)
	}
}
