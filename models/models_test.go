package models_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
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
		{Name: "g", WorkspaceDirName: "g", WorkspaceMode: models.ModeContainer,
			WorkspaceRealPath: ptr("/x"), WorkspaceDev: new(int64), WorkspaceIno: new(int64)},
		{Name: "h", WorkspaceDirName: "h", WorkspaceMode: models.ModeLocal, WorkspacePath: ptr("/x"),
			WorkspaceRealPath: ptr("/x"), WorkspaceIno: new(int64)},
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

// A Local folder's identity is recorded once, whole, and only for a Local
// project; the table refuses anything else even from raw SQL.
func TestRecordWorkspaceIdentity(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	u := owner(t, s)
	local := models.Project{Name: "l", WorkspaceDirName: "l", WorkspaceMode: models.ModeLocal, WorkspacePath: ptr("/srv/l")}
	box := models.Project{Name: "c", WorkspaceDirName: "c", WorkspaceMode: models.ModeContainer}
	for _, p := range []*models.Project{&local, &box} {
		if err := s.CreateProject(ctx, p, u.ID); err != nil {
			t.Fatal(err)
		}
	}
	if ps, err := s.LocalProjectsWithoutIdentity(ctx); err != nil || len(ps) != 1 || ps[0].ID != local.ID {
		t.Fatalf("without identity: %+v, %v", ps, err)
	}
	// dev_t and ino_t are unsigned: the top bit survives the round trip.
	if ok, err := s.RecordWorkspaceIdentity(ctx, local.ID, "/srv/l", -1, -2); err != nil || !ok {
		t.Fatalf("record: %v, %v", ok, err)
	}
	if ok, err := s.RecordWorkspaceIdentity(ctx, local.ID, "/elsewhere", 1, 2); err != nil || ok {
		t.Fatalf("a recorded identity was replaced: %v, %v", ok, err)
	}
	if ok, err := s.RecordWorkspaceIdentity(ctx, box.ID, "/srv/c", 1, 2); err != nil || ok {
		t.Fatalf("a container project got an identity: %v, %v", ok, err)
	}
	got, err := s.ProjectByID(ctx, local.ID)
	if err != nil || *got.WorkspaceRealPath != "/srv/l" || *got.WorkspaceDev != -1 || *got.WorkspaceIno != -2 {
		t.Fatalf("recorded %+v, %v", got, err)
	}
	if ps, err := s.LocalProjectsWithoutIdentity(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("without identity after recording: %+v, %v", ps, err)
	}
	for constraint, sql := range map[string]string{
		"projects_workspace_identity_local": "UPDATE projects SET workspace_real_path = '/x', workspace_dev = 1, workspace_ino = 1 WHERE id = ?",
		"projects_workspace_identity_whole": "UPDATE projects SET workspace_dev = NULL WHERE id = ?",
	} {
		id := local.ID
		if constraint == "projects_workspace_identity_local" {
			id = box.ID
		}
		var ce *models.ConstraintError
		if err := s.Exec(ctx, sql, id); !errors.As(err, &ce) || ce.Constraint != constraint {
			t.Errorf("%s: err = %v, want %s", sql, err, constraint)
		}
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

// One round trip reads what ProjectOfMember and SessionByID read apart,
// field for field, and finds nothing when the session is another
// project's or the person no member.
func TestProjectAndSessionOfMember(t *testing.T) {
	s := dbtest.Store(t)
	ctx := context.Background()
	u := owner(t, s)
	stranger := &models.User{Username: "stranger", PasswordHash: "x"}
	if err := s.CreateUser(ctx, stranger); err != nil {
		t.Fatal(err)
	}
	var ps [2]models.Project
	for i := range ps {
		ps[i] = models.Project{Name: fmt.Sprintf("p%d", i), WorkspaceDirName: fmt.Sprintf("p%d", i), WorkspaceMode: models.ModeContainer}
		if err := s.CreateProject(ctx, &ps[i], u.ID); err != nil {
			t.Fatal(err)
		}
	}
	slot, reason, closed := int32(7), "idle", time.Now().Add(-time.Minute).Round(time.Microsecond)
	cs := &models.CodeSession{ID: "edit_" + strings.Repeat("1", 32), ProjectID: ps[0].ID, UserID: u.ID, BaseCommit: strings.Repeat("a", 40),
		State: models.SessionOpen, OpenedAt: closed.Add(-time.Hour), LastSeenAt: closed, SandboxSlot: &slot}
	if err := s.CreateSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	// Every field set, the nullable ones too.
	if err := s.Exec(ctx, "UPDATE code_sessions SET state = ?, close_reason = ?, closed_at = ? WHERE id = ?", models.SessionClosed, reason, closed, cs.ID); err != nil {
		t.Fatal(err)
	}

	p, role, got, err := s.ProjectAndSessionOfMember(ctx, ps[0].ID, u.ID, cs.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantP, wantRole, err := s.ProjectOfMember(ctx, ps[0].ID, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.SessionByID(ctx, cs.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, wantP) || role != wantRole || !reflect.DeepEqual(got, want) {
		t.Fatalf("joined: %+v %q %+v\napart:  %+v %q %+v", p, role, got, wantP, wantRole, want)
	}
	if got.CloseReason == nil || *got.CloseReason != reason || got.ClosedAt == nil || got.SandboxSlot == nil || *got.SandboxSlot != slot {
		t.Fatalf("nullable fields lost: %+v", got)
	}

	for name, c := range map[string]struct {
		project, user int64
		session       string
	}{
		"another project's session": {ps[1].ID, u.ID, cs.ID},
		"a stranger":                {ps[0].ID, stranger.ID, cs.ID},
		"no such session":           {ps[0].ID, u.ID, "edit_" + strings.Repeat("2", 32)},
	} {
		if _, _, _, err := s.ProjectAndSessionOfMember(ctx, c.project, c.user, c.session); !errors.Is(err, models.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
}
