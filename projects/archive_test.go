package projects_test

import (
	"context"
	"errors"
	"testing"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
)

func (f *fixture) person(t *testing.T, name string, siteAdmin bool) *models.User {
	t.Helper()
	u := &models.User{Username: name, PasswordHash: "x", IsAdmin: siteAdmin}
	if err := f.store.CreateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	f.people[name] = u
	return u
}

// Unarchive is for the project's owners and site admins, members or not; a
// project admin, who may archive, cannot undo it.
func TestUnarchive(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	root := f.person(t, "root", true)
	archive := func() {
		t.Helper()
		if err := f.svc.Archive(ctx, f.access(t, "admin", auth.ProjectManage)); err != nil {
			t.Fatal(err)
		}
	}
	archived := func() bool {
		t.Helper()
		p, err := f.store.ProjectByID(ctx, f.project.ID)
		if err != nil {
			t.Fatal(err)
		}
		return p.Archived()
	}
	archive()
	for who, want := range map[string]error{"admin": auth.ErrForbidden, "member": auth.ErrForbidden, "outsider": projects.ErrNotFound} {
		if err := f.svc.Unarchive(ctx, f.people[who], f.project.ID); !errors.Is(err, want) || !archived() {
			t.Fatalf("%s unarchives: %v, want %v", who, err, want)
		}
	}
	if err := f.svc.Unarchive(ctx, f.people["owner"], f.project.ID); err != nil || archived() {
		t.Fatalf("the owner unarchives: %v", err)
	}
	if err := f.svc.Unarchive(ctx, f.people["owner"], f.project.ID); err != nil {
		t.Fatalf("unarchiving twice: %v", err)
	}
	archive()
	if err := f.svc.Unarchive(ctx, root, f.project.ID); err != nil || archived() {
		t.Fatalf("a site admin unarchives: %v", err)
	}
	if err := f.svc.Unarchive(ctx, root, f.project.ID+1000); !errors.Is(err, projects.ErrNotFound) {
		t.Fatalf("a site admin unarchives a missing project: %v", err)
	}
	// What Permit remembered yields at once: editing is back.
	if err := f.svc.Permit(ctx, f.people["admin"], f.project.ID, auth.CodeEdit); err != nil {
		t.Fatalf("editing after the unarchive: %v", err)
	}
}
