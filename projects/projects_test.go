package projects_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atelier/auth"
	"atelier/editsession"
	"atelier/events"
	"atelier/models"
	"atelier/projects"
	"atelier/testrig/pgtest"
	"atelier/testrig/stacktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is a Service over a real database, real git and a local object
// store, with one Container project and its people.
type fixture struct {
	svc      *projects.Service
	sessions *editsession.Sessions
	store    *models.Store
	project  *models.Project
	people   map[string]*models.User // owner, admin, member, outsider
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st := stacktest.New(t)
	store, git, code, ws, log := st.DB, st.Git, st.Code, st.WS, st.Log
	rec := events.New(store, log, events.Config{})
	t.Cleanup(rec.Close)
	sessions := editsession.New(editsession.Options{DB: store, Git: git, Code: code, Workspace: ws, Events: rec,
		Config: editsession.DefaultConfig, Now: time.Now, Log: log})
	f := &fixture{
		svc: projects.NewService(projects.Options{Store: store, Workspace: ws, Git: git, Code: code, Sessions: sessions,
			Now: time.Now, Log: log}),
		sessions: sessions,
		store:    store,
		people:   map[string]*models.User{},
	}
	for _, name := range []string{"owner", "admin", "member", "outsider"} {
		u := &models.User{Username: name, PasswordHash: "x"}
		if err := store.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		f.people[name] = u
	}
	var err error
	if f.project, err = f.svc.Create(ctx, f.people["owner"], projects.CreateInput{Name: "Matrix"}); err != nil {
		t.Fatal(err)
	}
	owner := f.access(t, "owner", auth.ProjectOwn)
	for _, role := range []auth.Role{auth.RoleAdmin, auth.RoleMember} {
		if _, err := f.svc.SetMember(ctx, owner, string(role), role); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) access(t *testing.T, who string, action auth.Action) *projects.Access {
	t.Helper()
	acc, err := f.svc.Authorize(context.Background(), f.people[who], f.project.ID, action)
	if err != nil {
		t.Fatalf("%s may not %s: %v", who, action, err)
	}
	return acc
}

// Who may do what in a project, active and archived: the rule lives in
// Authorize, so it is pinned here, next to it.
func TestAuthorizeMatrix(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	forbidden, archived, notFound := auth.ErrForbidden, projects.ErrArchived, projects.ErrNotFound
	type want map[auth.Action]error
	matrix := map[string]want{
		"owner":    {auth.CodeRead: nil, auth.CodeEdit: nil, auth.ProjectManage: nil, auth.ProjectOwn: nil},
		"admin":    {auth.CodeRead: nil, auth.CodeEdit: nil, auth.ProjectManage: nil, auth.ProjectOwn: forbidden},
		"member":   {auth.CodeRead: nil, auth.CodeEdit: forbidden, auth.ProjectManage: forbidden, auth.ProjectOwn: forbidden},
		"outsider": {auth.CodeRead: notFound, auth.CodeEdit: notFound, auth.ProjectManage: notFound, auth.ProjectOwn: notFound},
	}
	check := func(state string, edit func(who string, w error) error) {
		for who, actions := range matrix {
			for action, w := range actions {
				if action == auth.CodeEdit {
					w = edit(who, w)
				}
				t.Run(fmt.Sprintf("%s/%s/%s", state, who, action), func(t *testing.T) {
					if err := f.svc.Permit(ctx, f.people[who], f.project.ID, action); !errors.Is(err, w) {
						t.Fatalf("Permit: %v, want %v", err, w)
					}
					acc, err := f.svc.Authorize(ctx, f.people[who], f.project.ID, action)
					if !errors.Is(err, w) || (w == nil) != (acc != nil) {
						t.Fatalf("got %v (access %v), want %v", err, acc != nil, w)
					}
					if acc != nil && (acc.User.ID != f.people[who].ID || acc.Project.ID != f.project.ID) {
						t.Fatalf("access for the wrong person or project: %+v", acc)
					}
				})
			}
		}
	}
	check("active", func(_ string, w error) error { return w })

	if err := f.svc.Archive(ctx, f.access(t, "admin", auth.ProjectManage)); err != nil {
		t.Fatal(err)
	}
	// What Permit remembered from a moment ago yields to the archive at
	// once.
	for who, actions := range matrix {
		w := actions[auth.CodeEdit]
		if w == nil {
			w = archived
		}
		if err := f.svc.Permit(ctx, f.people[who], f.project.ID, auth.CodeEdit); !errors.Is(err, w) {
			t.Errorf("%s edits just after the archive: Permit says %v, want %v", who, err, w)
		}
	}
	// Archived, editing stops for those who could edit; the rest is as it was.
	check("archived", func(who string, w error) error {
		if w == nil {
			return archived
		}
		return w
	})

	// Nobody signed in, and a project that does not exist.
	if _, err := f.svc.Authorize(ctx, nil, f.project.ID, auth.CodeRead); !errors.Is(err, auth.ErrSignInRequired) {
		t.Fatalf("anonymous: %v", err)
	}
	if _, err := f.svc.Authorize(ctx, f.people["owner"], f.project.ID+1000, auth.CodeRead); !errors.Is(err, notFound) {
		t.Fatalf("missing project: %v", err)
	}
}

// Roles change only as ownership allows, ownership is offered rather than
// given, and a project never loses its last owner.
func TestMembershipRules(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	admin := f.access(t, "admin", auth.ProjectManage)
	owner := f.access(t, "owner", auth.ProjectOwn)

	type step struct {
		name   string
		acc    *projects.Access
		user   string
		role   auth.Role // "" removes
		want   error
		change projects.MemberChange
	}
	run := func(steps []step) {
		t.Helper()
		for _, c := range steps {
			var err error
			change := projects.RoleGiven
			if c.role == "" {
				err = f.svc.RemoveMember(ctx, c.acc, c.user)
			} else {
				change, err = f.svc.SetMember(ctx, c.acc, c.user, c.role)
			}
			if !errors.Is(err, c.want) || change != c.change {
				t.Fatalf("%s: got %v (%v), want %v (%v)", c.name, err, change, c.want, c.change)
			}
		}
	}
	run([]step{
		{"an admin cannot offer ownership", admin, "member", auth.RoleOwner, auth.ErrForbidden, 0},
		{"an admin cannot demote the owner", admin, "owner", auth.RoleMember, auth.ErrForbidden, 0},
		{"an admin cannot remove the owner", admin, "owner", "", auth.ErrForbidden, 0},
		{"an unknown role", owner, "member", "root", projects.ErrBadRole, 0},
		{"an unknown person", owner, "nobody", auth.RoleMember, projects.ErrUnknownUser, 0},
		{"removing a non-member", owner, "outsider", "", projects.ErrUnknownUser, 0},
		{"the last owner stays", owner, "owner", auth.RoleAdmin, projects.ErrLastOwner, 0},
		{"an admin adds a member", admin, "outsider", auth.RoleMember, nil, projects.RoleGiven},
		{"the owner offers ownership", owner, "admin", auth.RoleOwner, nil, projects.OwnerInvited},
		{"offering it again is no error", owner, "admin", auth.RoleOwner, nil, projects.OwnerInvited},
		{"an owner is one already", owner, "owner", auth.RoleOwner, nil, projects.RoleGiven},
		{"an offer changes nothing: the owner is still the last", owner, "owner", auth.RoleMember, projects.ErrLastOwner, 0},
	})
	if err := f.svc.AcceptInvitation(ctx, f.people["admin"], f.project.ID); err != nil {
		t.Fatalf("accepting: %v", err)
	}
	run([]step{{"once it is accepted, the first may step down", owner, "owner", auth.RoleMember, nil, projects.RoleGiven}})

	roles := map[string]string{}
	members, err := f.svc.Members(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		roles[m.Username] = m.Role
	}
	wantRoles := map[string]string{"owner": "member", "admin": "owner", "member": "member", "outsider": "member"}
	if fmt.Sprint(roles) != fmt.Sprint(wantRoles) {
		t.Fatalf("members %v, want %v", roles, wantRoles)
	}
}

// TestOwnedProjectsAreBounded: a person may own a bounded number of
// projects; twelve creations at once past the last free places let exactly
// that many through, and deleting one makes room again.
func TestOwnedProjectsAreBounded(t *testing.T) {
	ctx := context.Background()
	st := stacktest.New(t)
	rec := events.New(st.DB, st.Log, events.Config{})
	t.Cleanup(rec.Close)
	sessions := editsession.New(editsession.Options{DB: st.DB, Git: st.Git, Code: st.Code, Workspace: st.WS, Events: rec,
		Config: editsession.DefaultConfig, Now: time.Now, Log: st.Log})
	svc := projects.NewService(projects.Options{Store: st.DB, Workspace: st.WS, Git: st.Git, Code: st.Code,
		Sessions: sessions, Now: time.Now, Log: st.Log, MaxOwned: 4})
	u := &models.User{Username: "prolific", PasswordHash: "x"}
	if err := st.DB.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	first, err := svc.Create(ctx, u, projects.CreateInput{Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var made, refused atomic.Int32
	for i := range 12 {
		wg.Go(func() {
			_, err := svc.Create(ctx, u, projects.CreateInput{Name: fmt.Sprintf("p%d", i)})
			switch {
			case err == nil:
				made.Add(1)
			case errors.Is(err, projects.ErrTooManyProjects):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if made.Load() != 3 || refused.Load() != 9 {
		t.Fatalf("%d made and %d refused at once, want 3 and 9", made.Load(), refused.Load())
	}
	other := &models.User{Username: "other", PasswordHash: "x"}
	if err := st.DB.CreateUser(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, other, projects.CreateInput{Name: "theirs"}); err != nil {
		t.Fatalf("another person was refused: %v", err)
	}
	acc, err := svc.Authorize(ctx, u, first.ID, auth.ProjectOwn)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Delete(ctx, acc); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, u, projects.CreateInput{Name: "again"}); err != nil {
		t.Fatalf("after deleting one: %v", err)
	}
}
