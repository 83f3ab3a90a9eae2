package models

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Project workspace modes and statuses, as stored.
const (
	ModeContainer = "container"
	ModeLocal     = "local"

	StatusActive   = "active"
	StatusArchived = "archived"
)

var dirNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Project is one codebase. WorkspaceMode and WorkspacePath are one decision
// (ADR 0072): the path is set exactly when the mode is local. The tags repeat
// the migration's CHECKs so the struct documents the table it maps.
type Project struct {
	ID               int64   `json:"id"`
	Name             string  `json:"name" gorm:"check:projects_name_length,char_length(name) BETWEEN 1 AND 100"`
	WorkspaceDirName string  `json:"workspaceDirName" gorm:"check:projects_workspace_dir_name_format,workspace_dir_name ~ '^[A-Za-z0-9_-]{1,64}$'"`
	WorkspaceMode    string  `json:"workspaceMode" gorm:"default:container;check:projects_workspace_mode_known,workspace_mode IN ('container', 'local')"`
	WorkspacePath    *string `json:"workspacePath" gorm:"check:projects_workspace_path_matches_mode,(workspace_mode = 'local') = (workspace_path IS NOT NULL)"`
	Status           string  `json:"status" gorm:"default:active"`
	CanonicalCommit  *string `json:"canonicalCommit"`
	SandboxNetwork   string  `json:"sandboxNetwork" gorm:"default:deny"`
	// CheckCommand verifies each Change (nil: an owner or admin approves).
	CheckCommand *string `json:"checkCommand" gorm:"check:projects_check_command_length,check_command IS NULL OR char_length(check_command) BETWEEN 1 AND 1000"`
	// CreatedBy is written once, at creation (the "<-:create" permission
	// here, the trigger projects_creator_fixed in the table): the bound on
	// projects a person may hold counts it.
	CreatedBy  *int64     `json:"createdBy" gorm:"<-:create"`
	CreatedAt  time.Time  `json:"createdAt"`
	ArchivedAt *time.Time `json:"archivedAt"`

	// The Local folder as admitted at creation (workspace.Identity): set
	// together, only for a Local project; nil on rows from before they
	// were recorded. dev and ino are unsigned numbers kept bit for bit.
	WorkspaceRealPath *string `json:"-" gorm:"check:projects_workspace_identity_local,workspace_mode = 'local' OR workspace_real_path IS NULL"`
	WorkspaceDev      *int64  `json:"-" gorm:"check:projects_workspace_identity_whole,(workspace_real_path IS NULL) = (workspace_dev IS NULL) AND (workspace_dev IS NULL) = (workspace_ino IS NULL)"`
	WorkspaceIno      *int64  `json:"-"`
}

// Validate mirrors the projects table's CHECKs.
func (p *Project) Validate() error {
	switch {
	case p.Name == "" || len([]rune(p.Name)) > 100:
		return fmt.Errorf("%w: a project name has 1 to 100 characters", ErrInvalid)
	case !dirNamePattern.MatchString(p.WorkspaceDirName):
		return fmt.Errorf("%w: workspace dir name %q does not match %s", ErrInvalid, p.WorkspaceDirName, dirNamePattern)
	case p.WorkspaceMode != ModeContainer && p.WorkspaceMode != ModeLocal:
		return fmt.Errorf("%w: workspace mode %q is neither container nor local", ErrInvalid, p.WorkspaceMode)
	case (p.WorkspaceMode == ModeLocal) != (p.WorkspacePath != nil):
		return fmt.Errorf("%w: a local project needs a path and a container project has none", ErrInvalid)
	case (p.WorkspaceRealPath == nil) != (p.WorkspaceDev == nil) || (p.WorkspaceDev == nil) != (p.WorkspaceIno == nil):
		return fmt.Errorf("%w: a folder's identity is its resolved path, device and inode together", ErrInvalid)
	case p.WorkspaceRealPath != nil && p.WorkspaceMode != ModeLocal:
		return fmt.Errorf("%w: only a local project records a folder's identity", ErrInvalid)
	case p.Status != StatusActive && p.Status != StatusArchived:
		return fmt.Errorf("%w: project status %q", ErrInvalid, p.Status)
	case (p.Status == StatusArchived) != (p.ArchivedAt != nil):
		return fmt.Errorf("%w: archived_at is set exactly when archived", ErrInvalid)
	}
	return nil
}

// BeforeSave runs Validate for every write through GORM.
func (p *Project) BeforeSave(*gorm.DB) error { return p.Validate() }

// Archived reports whether the project is read-only.
func (p *Project) Archived() bool { return p.Status == StatusArchived }

// CreateProject inserts p with its first member, the owner.
func (s *Store) CreateProject(ctx context.Context, p *Project, ownerID int64) error {
	if p.Status == "" {
		p.Status = StatusActive
	}
	err := s.Tx(ctx, func(tx *Store) error {
		if err := tx.db.Create(p).Error; err != nil {
			return err
		}
		return tx.db.Create(&Member{ProjectID: p.ID, UserID: ownerID, Role: RoleOwner}).Error
	})
	if err != nil {
		return fmt.Errorf("models: create project %q: %w", p.Name, translate(err))
	}
	return nil
}

// ProjectByID returns the project or ErrNotFound.
func (s *Store) ProjectByID(ctx context.Context, id int64) (*Project, error) {
	var p Project
	if err := s.db.WithContext(ctx).First(&p, id).Error; err != nil {
		return nil, fmt.Errorf("models: project %d: %w", id, translate(err))
	}
	return &p, nil
}

// MemberProject is a project as one member sees it.
type MemberProject struct {
	Project
	Role string `json:"role"`
}

// ProjectsOf lists the projects userID belongs to, active ones first.
func (s *Store) ProjectsOf(ctx context.Context, userID int64) ([]MemberProject, error) {
	var ps []MemberProject
	err := s.db.WithContext(ctx).Table("projects").
		Select("projects.*, project_members.role").
		Joins("JOIN project_members ON project_members.project_id = projects.id").
		Where("project_members.user_id = ?", userID).
		Order("projects.status, lower(projects.name), projects.id").
		Scan(&ps).Error
	if err != nil {
		return nil, fmt.Errorf("models: projects of user %d: %w", userID, err)
	}
	return ps, nil
}

// ArchiveProject marks the project archived; archiving twice is a no-op.
func (s *Store) ArchiveProject(ctx context.Context, id int64, at time.Time) error {
	// UpdateColumns skips BeforeSave, which checks whole rows; the
	// table's CHECKs still guard this partial write.
	err := s.db.WithContext(ctx).Model(&Project{}).
		Where("id = ? AND status = ?", id, StatusActive).
		UpdateColumns(map[string]any{"status": StatusArchived, "archived_at": at}).Error
	if err != nil {
		return fmt.Errorf("models: archive project %d: %w", id, translate(err))
	}
	return nil
}

// UnarchiveProject makes an archived project active again and returns
// when it had been archived; ok is false when it was not archived (so
// unarchiving twice is a no-op). The row stays locked until the
// transaction ends.
func (s *Store) UnarchiveProject(ctx context.Context, id int64) (archivedAt time.Time, ok bool, err error) {
	var p Project
	err = s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).First(&p, id).Error
	if err != nil {
		return time.Time{}, false, fmt.Errorf("models: unarchive project %d: %w", id, translate(err))
	}
	if !p.Archived() {
		return time.Time{}, false, nil
	}
	// UpdateColumns skips BeforeSave, which checks whole rows; the
	// table's CHECKs still guard this partial write.
	err = s.db.WithContext(ctx).Model(&Project{}).Where("id = ?", id).
		UpdateColumns(map[string]any{"status": StatusActive, "archived_at": nil}).Error
	if err != nil {
		return time.Time{}, false, fmt.Errorf("models: unarchive project %d: %w", id, translate(err))
	}
	return *p.ArchivedAt, true, nil
}

// ArchivedProject is an archived project as the site admins' dashboard
// lists it, with its owners counted: a project whose last owner left has
// none, and only a site admin can bring it back.
type ArchivedProject struct {
	ID         int64
	Name       string
	ArchivedAt time.Time
	Owners     int
}

// ArchivedProjects lists every archived project, the latest archived first.
func (s *Store) ArchivedProjects(ctx context.Context) ([]ArchivedProject, error) {
	var ps []ArchivedProject
	err := s.db.WithContext(ctx).Raw(`SELECT p.id, p.name, p.archived_at,
			(SELECT count(*) FROM project_members AS m WHERE m.project_id = p.id AND m.role = ?) AS owners
		FROM projects AS p WHERE p.status = ? ORDER BY p.archived_at DESC, p.id`, RoleOwner, StatusArchived).Scan(&ps).Error
	if err != nil {
		return nil, fmt.Errorf("models: archived projects: %w", err)
	}
	return ps, nil
}

// NextProjectID draws the id the next project will have, so its folder's
// name can be derived from it before the row is written.
func (s *Store) NextProjectID(ctx context.Context) (int64, error) {
	var id int64
	err := s.db.WithContext(ctx).Raw(`SELECT nextval(pg_get_serial_sequence('projects', 'id'))`).Scan(&id).Error
	if err != nil {
		return 0, fmt.Errorf("models: next project id: %w", translate(err))
	}
	return id, nil
}

// LocalProjectsWithoutIdentity lists the Local projects whose folder's
// identity was never recorded (rows from before it was).
func (s *Store) LocalProjectsWithoutIdentity(ctx context.Context) ([]Project, error) {
	var ps []Project
	err := s.db.WithContext(ctx).
		Where("workspace_mode = ? AND workspace_real_path IS NULL", ModeLocal).
		Order("id").Find(&ps).Error
	if err != nil {
		return nil, fmt.Errorf("models: local projects without identity: %w", err)
	}
	return ps, nil
}

// RecordWorkspaceIdentity sets the identity of a Local project's folder
// where none is recorded yet; one already recorded is never replaced. It
// reports whether the row was changed.
func (s *Store) RecordWorkspaceIdentity(ctx context.Context, id int64, realPath string, dev, ino int64) (bool, error) {
	// UpdateColumns skips BeforeSave, which checks whole rows; the
	// table's CHECKs guard this partial write.
	res := s.db.WithContext(ctx).Model(&Project{}).
		Where("id = ? AND workspace_mode = ? AND workspace_real_path IS NULL", id, ModeLocal).
		UpdateColumns(map[string]any{"workspace_real_path": realPath, "workspace_dev": dev, "workspace_ino": ino})
	if res.Error != nil {
		return false, fmt.Errorf("models: record folder identity of project %d: %w", id, translate(res.Error))
	}
	return res.RowsAffected == 1, nil
}

// DeleteProject removes the project's row and, by cascade, its members.
func (s *Store) DeleteProject(ctx context.Context, id int64) error {
	res := s.db.WithContext(ctx).Delete(&Project{}, id)
	if res.Error != nil {
		return fmt.Errorf("models: delete project %d: %w", id, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: delete project %d: %w", id, ErrNotFound)
	}
	return nil
}

// Project roles, as stored in project_members.role.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// Member is one person's role in one project.
type Member struct {
	ProjectID int64     `json:"projectId" gorm:"primaryKey;autoIncrement:false"`
	UserID    int64     `json:"userId" gorm:"primaryKey;autoIncrement:false"`
	Role      string    `json:"role" gorm:"check:project_members_role_known,role IN ('owner', 'admin', 'member')"`
	CreatedAt time.Time `json:"createdAt"`
}

// TableName maps Member to project_members.
func (Member) TableName() string { return "project_members" }

// BeforeSave mirrors project_members_role_known.
func (m *Member) BeforeSave(*gorm.DB) error {
	switch m.Role {
	case RoleOwner, RoleAdmin, RoleMember:
		return nil
	}
	return fmt.Errorf("%w: role %q is not owner, admin or member", ErrInvalid, m.Role)
}

// MemberRole returns userID's role in projectID, or ErrNotFound when the user
// is not a member.
func (s *Store) MemberRole(ctx context.Context, projectID, userID int64) (string, error) {
	var m Member
	err := s.db.WithContext(ctx).Where("project_id = ? AND user_id = ?", projectID, userID).Take(&m).Error
	if err != nil {
		return "", fmt.Errorf("models: member %d of project %d: %w", userID, projectID, translate(err))
	}
	return m.Role, nil
}

// ProjectOfMember returns the project and userID's role in it, in one
// round trip; ErrNotFound when either is missing.
func (s *Store) ProjectOfMember(ctx context.Context, projectID, userID int64) (*Project, string, error) {
	var row struct {
		Project `gorm:"embedded"`
		Role    string
	}
	err := s.db.WithContext(ctx).Table("projects").
		Select("projects.*, project_members.role").
		Joins("JOIN project_members ON project_members.project_id = projects.id AND project_members.user_id = ?", userID).
		Where("projects.id = ?", projectID).
		Take(&row).Error
	if err != nil {
		return nil, "", fmt.Errorf("models: project %d of member %d: %w", projectID, userID, translate(err))
	}
	return &row.Project, row.Role, nil
}

// ProjectAndSessionOfMember is ProjectOfMember and SessionByID in one
// round trip, for the requests of an edit session: the project, the
// member's role and the session, which must be the project's. ErrNotFound
// when any of the three is missing; the caller then asks for each alone to
// learn which.
func (s *Store) ProjectAndSessionOfMember(ctx context.Context, projectID, userID int64, sessionID string) (*Project, string, *CodeSession, error) {
	columns, err := s.prefixedColumns(&CodeSession{}, "code_sessions", "s_") // the tag's embeddedPrefix
	if err != nil {
		return nil, "", nil, err
	}
	var row struct {
		Project `gorm:"embedded"`
		Role    string
		Session CodeSession `gorm:"embedded;embeddedPrefix:s_"`
	}
	err = s.db.WithContext(ctx).Table("projects").
		Select("projects.*, project_members.role, "+columns).
		Joins("JOIN project_members ON project_members.project_id = projects.id AND project_members.user_id = ?", userID).
		Joins("JOIN code_sessions ON code_sessions.project_id = projects.id AND code_sessions.id = ?", sessionID).
		Where("projects.id = ?", projectID).
		Take(&row).Error
	if err != nil {
		return nil, "", nil, fmt.Errorf("models: session %s of project %d of member %d: %w", sessionID, projectID, userID, translate(err))
	}
	return &row.Project, row.Role, &row.Session, nil
}

// prefixedColumns is the select list "table.col AS prefix_col, ..." of
// every field of model, so that a row joined with another table's keeps
// the model whole as its fields change.
func (s *Store) prefixedColumns(model any, table, prefix string) (string, error) {
	stmt := &gorm.Statement{DB: s.db}
	if err := stmt.Parse(model); err != nil {
		return "", fmt.Errorf("models: columns of %T: %w", model, err)
	}
	cols := make([]string, len(stmt.Schema.DBNames))
	for i, name := range stmt.Schema.DBNames {
		cols[i] = table + "." + name + " AS " + prefix + name
	}
	return strings.Join(cols, ", "), nil
}

// ProjectMember is a member with the user's name, for listing.
type ProjectMember struct {
	UserID   int64  `json:"userId"`
	Username string `json:"username"`
	Role     string `json:"role"`
}

// Members lists a project's members, owners first.
func (s *Store) Members(ctx context.Context, projectID int64) ([]ProjectMember, error) {
	var ms []ProjectMember
	err := s.db.WithContext(ctx).Table("project_members").
		Select("project_members.user_id, users.username, project_members.role").
		Joins("JOIN users ON users.id = project_members.user_id").
		Where("project_members.project_id = ?", projectID).
		Order("array_position(ARRAY['owner','admin','member'], project_members.role), users.username").
		Scan(&ms).Error
	if err != nil {
		return nil, fmt.Errorf("models: members of project %d: %w", projectID, err)
	}
	return ms, nil
}

// SetMember adds userID to the project with role, or changes the role of an
// existing member.
func (s *Store) SetMember(ctx context.Context, m *Member) error {
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "project_id"}, {Name: "user_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"role"}),
	}).Create(m).Error
	if err != nil {
		return fmt.Errorf("models: set member %d of project %d: %w", m.UserID, m.ProjectID, translate(err))
	}
	return nil
}

// RemoveMember deletes a membership; ErrNotFound when there was none.
func (s *Store) RemoveMember(ctx context.Context, projectID, userID int64) error {
	res := s.db.WithContext(ctx).Where("project_id = ? AND user_id = ?", projectID, userID).Delete(&Member{})
	if res.Error != nil {
		return fmt.Errorf("models: remove member %d of project %d: %w", userID, projectID, res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: remove member %d of project %d: %w", userID, projectID, ErrNotFound)
	}
	return nil
}

// LockOwners takes a row lock on the project's owner memberships, so that
// "is this the last owner?" and the change after it are one step.
func (s *Store) LockOwners(ctx context.Context, projectID int64) (int, error) {
	var ms []Member
	err := s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
		Where("project_id = ? AND role = ?", projectID, RoleOwner).Find(&ms).Error
	if err != nil {
		return 0, fmt.Errorf("models: owners of project %d: %w", projectID, err)
	}
	return len(ms), nil
}

// EarliestAdminLocked returns the project admin who joined first and locks
// their membership, or ErrNotFound when the project has no admin.
func (s *Store) EarliestAdminLocked(ctx context.Context, projectID int64) (int64, error) {
	var m Member
	err := s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
		Where("project_id = ? AND role = ?", projectID, RoleAdmin).
		Order("created_at, user_id").Take(&m).Error
	if err != nil {
		return 0, fmt.Errorf("models: earliest admin of project %d: %w", projectID, translate(err))
	}
	return m.UserID, nil
}

// OwnersAndAdmins counts the project's owners and admins: the people who
// may approve its Changes.
func (s *Store) OwnersAndAdmins(ctx context.Context, projectID int64) (int, error) {
	var n int
	err := s.db.WithContext(ctx).Raw(`SELECT count(*) FROM project_members WHERE project_id = ? AND role IN (?, ?)`,
		projectID, RoleOwner, RoleAdmin).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("models: owners and admins of project %d: %w", projectID, err)
	}
	return n, nil
}

// SetSandboxNetwork records whether the project's sandbox reaches the
// network ("allow") or only its own loopback ("deny").
func (s *Store) SetSandboxNetwork(ctx context.Context, id int64, network string) error {
	err := s.db.WithContext(ctx).Model(&Project{}).Where("id = ?", id).UpdateColumn("sandbox_network", network).Error
	if err != nil {
		return fmt.Errorf("models: sandbox network of project %d: %w", id, translate(err))
	}
	return nil
}
