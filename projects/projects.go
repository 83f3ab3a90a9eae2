// Package projects creates, lists, archives and deletes projects and manages
// who belongs to them. Where a project's code lives is workspace's business;
// who may do what is auth.Can's.
package projects

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"atelier/auth"
	"atelier/models"
	"atelier/workspace"
)

var (
	ErrNotFound    = errors.New("projects: no such project")
	ErrBadName     = errors.New("projects: a project name has 1 to 100 characters and no control characters")
	ErrBadMode     = errors.New("projects: mode is container or local")
	ErrPathInMode  = errors.New("projects: a container project takes no path")
	ErrArchived    = errors.New("projects: the project is archived")
	ErrLastOwner   = errors.New("projects: a project keeps at least one owner")
	ErrUnknownUser = errors.New("projects: no user with that name")
	ErrBadRole     = errors.New("projects: role is owner, admin or member")
)

// maxDirNameTries bounds the search for a free workspace folder name.
const maxDirNameTries = 100

// Service is the project use cases.
type Service struct {
	store *models.Store
	ws    *workspace.Workspaces
	now   func() time.Time
	log   *slog.Logger
}

// NewService returns a Service.
func NewService(store *models.Store, ws *workspace.Workspaces, now func() time.Time, log *slog.Logger) *Service {
	return &Service{store: store, ws: ws, now: now, log: log}
}

// Access is a member's view of one project.
type Access struct {
	Project *models.Project
	User    *models.User
	Role    auth.Role
}

// Can reports whether the member may perform action.
func (a *Access) Can(action auth.Action) bool { return auth.Can(a.Role, action) }

// Authorize loads the project for user and checks action. Someone who is not
// a member gets ErrNotFound, exactly as for a project that does not exist, so
// that existence does not leak; a member without the permission gets
// auth.ErrForbidden.
func (s *Service) Authorize(ctx context.Context, user *models.User, projectID int64, action auth.Action) (*Access, error) {
	if user == nil {
		return nil, auth.ErrSignInRequired
	}
	role, err := s.store.MemberRole(ctx, projectID, user.ID)
	if errors.Is(err, models.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	p, err := s.store.ProjectByID(ctx, projectID)
	if errors.Is(err, models.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	acc := &Access{Project: p, User: user, Role: auth.Role(role)}
	if !acc.Can(action) {
		return nil, auth.ErrForbidden
	}
	if action == auth.CodeEdit && p.Archived() {
		return nil, ErrArchived
	}
	return acc, nil
}

// List returns the projects user belongs to.
func (s *Service) List(ctx context.Context, user *models.User) ([]models.MemberProject, error) {
	return s.store.ProjectsOf(ctx, user.ID)
}

// CreateInput is what a person fills in to create a project.
type CreateInput struct {
	Name string
	Mode string // "container" (the default when empty) or "local"
	Path string // the Local folder; empty for Container
}

// NormalizePath is how a typed Local path is read, the same on creation and
// in the live check: surrounding spaces and newlines from a paste go.
func NormalizePath(path string) string { return strings.TrimSpace(path) }

// CheckLocalPath runs the Local creation guard; it returns a
// *workspace.PathError when the folder is refused.
func (s *Service) CheckLocalPath(path string) error {
	return s.ws.CheckLocal(NormalizePath(path))
}

// Create makes a project owned by user. A Container project gets its managed
// folder; a Local project's folder is checked and never written to.
func (s *Service) Create(ctx context.Context, user *models.User, in CreateInput) (*models.Project, error) {
	name := strings.TrimSpace(in.Name)
	if !validName(name) {
		return nil, ErrBadName
	}
	mode := in.Mode
	if mode == "" {
		mode = models.ModeContainer
	}
	var path *string
	switch mode {
	case models.ModeContainer:
		if NormalizePath(in.Path) != "" {
			return nil, ErrPathInMode
		}
	case models.ModeLocal:
		p := NormalizePath(in.Path)
		if err := s.ws.CheckLocal(p); err != nil {
			return nil, err
		}
		path = &p
	default:
		return nil, ErrBadMode
	}

	base := workspace.DirNameFrom(name)
	for n := 1; n <= maxDirNameTries; n++ {
		p := &models.Project{
			Name:             name,
			WorkspaceDirName: workspace.DirNameCandidate(base, n),
			WorkspaceMode:    mode,
			WorkspacePath:    path,
			CreatedBy:        &user.ID,
		}
		err := s.insert(ctx, p, user.ID)
		if isDirNameTaken(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.log.Info("project created", "project", p.ID, "mode", p.WorkspaceMode, "dir", p.WorkspaceDirName, "by", user.Username)
		return p, nil
	}
	return nil, fmt.Errorf("projects: no free workspace folder name for %q after %d tries", base, maxDirNameTries)
}

// insert writes the row and, for a Container project, makes its folder in the
// same step: if the folder cannot be made the row is rolled back, and if the
// commit fails the folder is removed.
func (s *Service) insert(ctx context.Context, p *models.Project, ownerID int64) error {
	madeDir := false
	err := s.store.Tx(ctx, func(tx *models.Store) error {
		if err := tx.CreateProject(ctx, p, ownerID); err != nil {
			return err
		}
		if p.WorkspaceMode != models.ModeContainer {
			return nil
		}
		if _, err := s.ws.CreateManaged(p.WorkspaceDirName); err != nil {
			return err
		}
		madeDir = true
		return nil
	})
	if err != nil && madeDir {
		if rmErr := s.ws.RemoveManaged(p.WorkspaceDirName); rmErr != nil {
			s.log.Error("project folder left behind after a failed create", "dir", p.WorkspaceDirName, "err", rmErr)
		}
	}
	return err
}

// isDirNameTaken reports a clash on the folder name, in the table or on disk.
func isDirNameTaken(err error) bool {
	var ce *models.ConstraintError
	if errors.As(err, &ce) && ce.Constraint == "projects_workspace_dir_name_key" {
		return true
	}
	return errors.Is(err, fs.ErrExist)
}

func validName(name string) bool {
	if name == "" || utf8.RuneCountInString(name) > 100 || !utf8.ValidString(name) {
		return false
	}
	return strings.IndexFunc(name, unicode.IsControl) < 0
}

// Location is what the project row says about where its code lives.
func Location(p *models.Project) workspace.Location {
	loc := workspace.Location{DirName: p.WorkspaceDirName, Mode: workspace.Mode(p.WorkspaceMode)}
	if p.WorkspacePath != nil {
		loc.Path = *p.WorkspacePath
	}
	return loc
}

// CodeReady is the Code tab's gate (workspace.CodeReady).
func (s *Service) CodeReady(p *models.Project) error {
	return s.ws.CodeReady(Location(p))
}

// Archive makes the project read-only. Archiving twice is fine.
func (s *Service) Archive(ctx context.Context, acc *Access) error {
	if err := s.store.ArchiveProject(ctx, acc.Project.ID, s.now()); err != nil {
		return err
	}
	s.log.Info("project archived", "project", acc.Project.ID, "by", acc.User.Username)
	return nil
}

// Delete removes the project and everything Atelier keeps for it. A Local
// project's folder belongs to the person and is never touched.
func (s *Service) Delete(ctx context.Context, acc *Access) error {
	p := acc.Project
	if err := s.store.DeleteProject(ctx, p.ID); err != nil {
		return err
	}
	if p.WorkspaceMode == models.ModeContainer {
		if err := s.ws.RemoveManaged(p.WorkspaceDirName); err != nil {
			// The row is gone, so the folder is only garbage; a later project
			// never adopts it (CreateManaged refuses an existing folder).
			s.log.Error("project deleted but its folder was not removed", "project", p.ID, "dir", p.WorkspaceDirName, "err", err)
		}
	}
	s.log.Info("project deleted", "project", p.ID, "by", acc.User.Username)
	return nil
}

// Members lists the project's members.
func (s *Service) Members(ctx context.Context, acc *Access) ([]models.ProjectMember, error) {
	return s.store.Members(ctx, acc.Project.ID)
}

// SetMember adds username with role or changes their role.
func (s *Service) SetMember(ctx context.Context, acc *Access, username string, role auth.Role) error {
	if !auth.ValidRole(role) {
		return ErrBadRole
	}
	return s.changeMember(ctx, acc, username, role)
}

// RemoveMember takes username out of the project.
func (s *Service) RemoveMember(ctx context.Context, acc *Access, username string) error {
	return s.changeMember(ctx, acc, username, "")
}

// changeMember gives username the role, or removes them when role is "".
// Granting or taking the owner role needs an owner, and the last owner
// stays; the owners are locked so two changes cannot both remove "the
// other" owner.
func (s *Service) changeMember(ctx context.Context, acc *Access, username string, role auth.Role) error {
	u, err := s.store.UserByName(ctx, strings.TrimSpace(username))
	if errors.Is(err, models.ErrNotFound) {
		return ErrUnknownUser
	}
	if err != nil {
		return err
	}
	return s.store.Tx(ctx, func(tx *models.Store) error {
		owners, err := tx.LockOwners(ctx, acc.Project.ID)
		if err != nil {
			return err
		}
		current, err := tx.MemberRole(ctx, acc.Project.ID, u.ID)
		switch {
		case errors.Is(err, models.ErrNotFound) && role == "":
			return ErrUnknownUser
		case err != nil && !errors.Is(err, models.ErrNotFound):
			return err
		}
		wasOwner := current == models.RoleOwner
		if (wasOwner || role == auth.RoleOwner) && !acc.Can(auth.ProjectOwn) {
			return auth.ErrForbidden
		}
		if wasOwner && role != auth.RoleOwner && owners <= 1 {
			return ErrLastOwner
		}
		if role == "" {
			return tx.RemoveMember(ctx, acc.Project.ID, u.ID)
		}
		return tx.SetMember(ctx, &models.Member{ProjectID: acc.Project.ID, UserID: u.ID, Role: string(role)})
	})
}
