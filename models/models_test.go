package models_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"atelier/internal/dbtest"
	"atelier/models"
	"atelier/pgembed/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ptr[T any](v T) *T { return &v }

func owner(t *testing.T, s *models.Store) *models.User {
	t.Helper()
	u := &models.User{Username: "owner", PasswordHash: "x"}
	if err := s.CreateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// The mode/path rule lives in PostgreSQL itself: a raw INSERT that breaks it,
// as a seed script might write, is refused by the CHECK.
func TestWorkspaceCheckRefusesRawInserts(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	cases := []struct {
		name, mode string
		path       *string
	}{
		{"local-without-path", "local", nil},
		{"container-with-path", "container", ptr("/x")},
	}
	for _, tc := range cases {
		err := s.Exec(ctx, "INSERT INTO projects (name, workspace_dir_name, workspace_mode, workspace_path) VALUES (?, ?, ?, ?)",
			tc.name, tc.name, tc.mode, tc.path)
		var ce *models.ConstraintError
		if !errors.As(err, &ce) || ce.Constraint != "projects_workspace_path_matches_mode" || !errors.Is(err, models.ErrInvalid) {
			t.Errorf("%s: err = %v, want the projects_workspace_path_matches_mode CHECK", tc.name, err)
		}
	}
	// The default mode is container, and then the path must be NULL.
	if err := s.Exec(ctx, "INSERT INTO projects (name, workspace_dir_name) VALUES ('d', 'd')"); err != nil {
		t.Fatalf("default mode: %v", err)
	}
	if err := s.Exec(ctx, "INSERT INTO projects (name, workspace_dir_name, workspace_mode, workspace_path) VALUES ('l', 'l', 'local', '/srv/l')"); err != nil {
		t.Fatalf("a valid local row: %v", err)
	}
	if err := s.Exec(ctx, "INSERT INTO projects (name, workspace_dir_name) VALUES ('bad', '../etc')"); !errors.Is(err, models.ErrInvalid) {
		t.Fatalf("dir name with a slash: err = %v, want ErrInvalid", err)
	}
}

// The model mirrors the CHECK, so GORM writes fail before PostgreSQL with a
// readable error.
func TestProjectModelMirrorsChecks(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	u := owner(t, s)
	bad := []models.Project{
		{Name: "a", WorkspaceDirName: "a", WorkspaceMode: models.ModeLocal},
		{Name: "b", WorkspaceDirName: "b", WorkspaceMode: models.ModeContainer, WorkspacePath: ptr("/x")},
		{Name: "c", WorkspaceDirName: "c/d", WorkspaceMode: models.ModeContainer},
		{Name: "", WorkspaceDirName: "e", WorkspaceMode: models.ModeContainer},
		{Name: "f", WorkspaceDirName: "f", WorkspaceMode: "docker"},
	}
	for _, p := range bad {
		if err := s.CreateProject(ctx, &p, u.ID); !errors.Is(err, models.ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", p, err)
		}
	}
	p := models.Project{Name: "ok", WorkspaceDirName: "ok", WorkspaceMode: models.ModeContainer}
	if err := s.CreateProject(ctx, &p, u.ID); err != nil {
		t.Fatal(err)
	}
	if role, err := s.MemberRole(ctx, p.ID, u.ID); err != nil || role != models.RoleOwner {
		t.Fatalf("creator's role = %q, %v; want owner", role, err)
	}
	dup := models.Project{Name: "dup", WorkspaceDirName: "ok", WorkspaceMode: models.ModeContainer}
	var ce *models.ConstraintError
	if err := s.CreateProject(ctx, &dup, u.ID); !errors.As(err, &ce) || ce.Constraint != "projects_workspace_dir_name_key" {
		t.Fatalf("duplicate dir name: err = %v", err)
	}
}

func TestArchiveAndMembers(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	u := owner(t, s)
	other := &models.User{Username: "other", PasswordHash: "x"}
	if err := s.CreateUser(ctx, other); err != nil {
		t.Fatal(err)
	}
	p := models.Project{Name: "p", WorkspaceDirName: "p", WorkspaceMode: models.ModeContainer}
	if err := s.CreateProject(ctx, &p, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.ArchiveProject(ctx, p.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	got, err := s.ProjectByID(ctx, p.ID)
	if err != nil || !got.Archived() || got.ArchivedAt == nil {
		t.Fatalf("after archive: %+v, %v", got, err)
	}
	if err := s.SetMember(ctx, &models.Member{ProjectID: p.ID, UserID: other.ID, Role: "guest"}); !errors.Is(err, models.ErrInvalid) {
		t.Fatalf("unknown role: %v", err)
	}
	if err := s.SetMember(ctx, &models.Member{ProjectID: p.ID, UserID: other.ID, Role: models.RoleMember}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMember(ctx, &models.Member{ProjectID: p.ID, UserID: other.ID, Role: models.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Members(ctx, p.ID)
	if err != nil || len(ms) != 2 || ms[0].Role != models.RoleOwner || ms[1].Role != models.RoleAdmin {
		t.Fatalf("members = %+v, %v", ms, err)
	}
	if ps, err := s.ProjectsOf(ctx, other.ID); err != nil || len(ps) != 1 || ps[0].Role != models.RoleAdmin || ps[0].Name != "p" {
		t.Fatalf("projects of other = %+v, %v", ps, err)
	}
	if err := s.DeleteProject(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MemberRole(ctx, p.ID, other.ID); !errors.Is(err, models.ErrNotFound) {
		t.Fatalf("membership survived the project: %v", err)
	}
}

func TestFirstUserIsCreatedOnce(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	results := make(chan bool, 8)
	for i := 0; i < cap(results); i++ {
		go func() {
			created, err := s.CreateUserIfNoneExist(ctx, &models.User{Username: "admin", PasswordHash: "x", IsAdmin: true})
			if err != nil {
				t.Error(err)
			}
			results <- created
		}()
	}
	n := 0
	for i := 0; i < cap(results); i++ {
		if <-results {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent first starts created the admin, want exactly 1", n)
	}
}
