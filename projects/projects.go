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
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"atelier/auth"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage/codestore"
	"atelier/workspace"
)

var (
	ErrNotFound    = fault.New(fault.NotFound, "not_found", "projects: no such project", "There is no such project, or you are not a member of it.")
	ErrBadName     = fault.New(fault.BadInput, "bad_name", "projects: a project name has 1 to 100 characters and no control characters", "A project name has 1 to 100 characters and no control characters.")
	ErrBadMode     = fault.New(fault.BadInput, "bad_mode", "projects: mode is container or local", "Mode is container or local.")
	ErrPathInMode  = fault.New(fault.BadInput, "path_not_allowed", "projects: a container project takes no path", "A container project takes no path.")
	ErrArchived    = fault.New(fault.Conflict, "archived", "projects: the project is archived", "The project is archived.")
	ErrLastOwner   = fault.New(fault.Conflict, "last_owner", "projects: a project keeps at least one owner", "A project keeps at least one owner.")
	ErrUnknownUser = fault.New(fault.BadInput, "unknown_user", "projects: no user with that name", "No user with that name.")
	ErrBadRole     = fault.New(fault.BadInput, "bad_role", "projects: role is owner, admin or member", "Role is owner, admin or member.")
	ErrBadNetwork  = fault.New(fault.BadInput, "bad_network", "projects: the sandbox network is deny or allow", "The sandbox network is deny or allow.")
	// ErrTooManyProjects is a creation past the projects one person may
	// create. Waiting does not help, deleting one does: so a 403, not a
	// 429.
	ErrTooManyProjects = fault.New(fault.Forbidden, "too_many_projects", "projects: you created as many projects as a person may", "You have created as many projects as a person may; delete one first.")
)

// maxDirNameTries bounds how many ids a creation draws when folder names
// derived from them are taken (only something made outside Atelier can
// take one).
const maxDirNameTries = 3

// SessionEnder ends the edit sessions of a project, or of one person on
// it, resumes those an archive paused, and, for a deleted project, removes
// what they keep for it as a whole (editsession.Sessions, the one owner of
// a session's life).
type SessionEnder interface {
	EndProjectSessions(ctx context.Context, projectID int64, reason string) error
	EndMemberSessions(ctx context.Context, projectID, userID int64) error
	ResumeProjectSessions(ctx context.Context, tx *models.Store, projectID int64, pausedSince time.Time) error
	EndProject(ctx context.Context, p *models.Project) error
}

// Service is the project use cases.
type Service struct {
	sessions SessionEnder
	store    *models.Store
	ws       *workspace.Workspaces
	git      *gitsvc.Service
	code     *codestore.Store
	now      func() time.Time
	log      *slog.Logger
	maxOwned int  // projects one person may create (and keep)
	noLocal  bool // Options.NoLocal
	roles    roles
	// tell carries what this instance forgot to the others (TellPeers);
	// nil tells no one.
	tell func(ctx context.Context, forgotten string)
}

// DefaultMaxOwned is how many projects one person may have created (and
// not deleted) unless the operator says otherwise.
const DefaultMaxOwned = 100

// Options are what a Service works with.
type Options struct {
	Store     *models.Store
	Workspace *workspace.Workspaces
	Git       *gitsvc.Service
	Code      *codestore.Store
	// Sessions ends the edit sessions of a project that is deleted or of
	// a person who may no longer edit it, and resumes those of a project
	// that is unarchived; nil when there are none.
	Sessions SessionEnder
	Now      func() time.Time
	Log      *slog.Logger
	// MaxOwned is how many projects one person may create (and keep);
	// 0 is DefaultMaxOwned.
	MaxOwned int
	// NoLocal: this instance's host does not have the Local projects'
	// folders (another instance serves them), so none is made here.
	NoLocal bool
}

// ErrLocalUnserved: the Local projects' folders are not on this host,
// and no instance is named that has them.
var ErrLocalUnserved = fault.New(fault.Unavailable, "local_unavailable",
	"projects: Local projects are not served by this instance",
	"This site runs on several servers and none of them is set to hold Local projects' folders, so they cannot be opened or made here. Its administrator names one with ATELIER_LOCAL_HOST.")

// NewService returns a Service.
func NewService(o Options) *Service {
	if o.MaxOwned <= 0 {
		o.MaxOwned = DefaultMaxOwned
	}
	return &Service{store: o.Store, ws: o.Workspace, git: o.Git, code: o.Code, sessions: o.Sessions, now: o.Now,
		log: o.Log, maxOwned: o.MaxOwned, noLocal: o.NoLocal}
}

// WorkspaceForkName is the git service's repository where a person's
// Changes on a project are written (ws-<project>-<user>), derived from ids
// alone; WorkspaceForkPrefix names all of a project's.
func WorkspaceForkName(projectID, userID int64) string {
	return WorkspaceForkPrefix(projectID) + strconv.FormatInt(userID, 10)
}

// WorkspaceForkPrefix starts the name of every workspace fork of a project.
func WorkspaceForkPrefix(projectID int64) string {
	return "ws-" + strconv.FormatInt(projectID, 10) + "-"
}

// removeWorkspaceForks deletes the project's workspace forks (of either
// mode: a Local project's Changes are written there too).
func (s *Service) removeWorkspaceForks(ctx context.Context, p *models.Project) {
	names, err := s.git.Names(WorkspaceForkPrefix(p.ID))
	if err != nil {
		s.log.Error("workspace forks not listed", "project", p.ID, "err", err)
		return
	}
	for _, n := range names {
		if err := s.git.RemoveRepo(ctx, n); err != nil {
			s.log.Error("workspace fork left behind", "project", p.ID, "repo", n, "err", err)
		}
	}
}

// CanonicalName is the git service's name of a Container project's canonical
// repository. It derives from the row id only, so cleanup never trusts a
// name read from anywhere else.
func CanonicalName(projectID int64) string { return "project-" + strconv.FormatInt(projectID, 10) }

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
	gen := s.roles.generation()
	p, role, err := s.store.ProjectOfMember(ctx, projectID, user.ID)
	if errors.Is(err, models.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	s.remember(memberKey{project: projectID, user: user.ID}, p, role, gen)
	if err := verdict(auth.Role(role), p.Archived(), action); err != nil {
		return nil, err
	}
	return &Access{Project: p, User: user, Role: auth.Role(role)}, nil
}

// AuthorizeSession is Authorize for a request of the edit session
// sessionID, with the session's row read in the same round trip. The row
// is nil when that read found nothing (no such session, or another
// project's): the caller reads it alone to say why.
func (s *Service) AuthorizeSession(ctx context.Context, user *models.User, projectID int64, sessionID string, action auth.Action) (*Access, *models.CodeSession, error) {
	if user == nil {
		return nil, nil, auth.ErrSignInRequired
	}
	gen := s.roles.generation()
	p, role, cs, err := s.store.ProjectAndSessionOfMember(ctx, projectID, user.ID, sessionID)
	if errors.Is(err, models.ErrNotFound) {
		acc, err := s.Authorize(ctx, user, projectID, action)
		return acc, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	s.remember(memberKey{project: projectID, user: user.ID}, p, role, gen)
	if err := verdict(auth.Role(role), p.Archived(), action); err != nil {
		return nil, nil, err
	}
	return &Access{Project: p, User: user, Role: auth.Role(role)}, cs, nil
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

// CheckLocalPath runs the Local creation rules for user on a typed folder,
// as Create would; it returns a *workspace.PathError when it is refused.
func (s *Service) CheckLocalPath(user *models.User, path string) error {
	_, err := s.ws.AdmitLocal(NormalizePath(path), isSiteAdmin(user))
	return err
}

// LocalOffer says where user may create Local projects, for the form to
// say before they type.
func (s *Service) LocalOffer(user *models.User) workspace.LocalOffer {
	return s.ws.LocalOffer(isSiteAdmin(user))
}

func isSiteAdmin(user *models.User) bool { return user != nil && user.IsAdmin }

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
	var ident workspace.Identity
	switch mode {
	case models.ModeContainer:
		if NormalizePath(in.Path) != "" {
			return nil, ErrPathInMode
		}
	case models.ModeLocal:
		if s.noLocal {
			return nil, ErrLocalUnserved
		}
		p := NormalizePath(in.Path)
		var err error
		if ident, err = s.ws.AdmitLocal(p, isSiteAdmin(user)); err != nil {
			return nil, err
		}
		path = &p
	default:
		return nil, ErrBadMode
	}

	// The folder's name derives from the row's id (workspace.DirNameFor),
	// so no name, however many share it, can make a creation fail. Only a
	// row or folder made outside Atelier can hold the name; the next id
	// then gets another.
	for range maxDirNameTries {
		id, err := s.store.NextProjectID(ctx)
		if err != nil {
			return nil, err
		}
		p := &models.Project{
			ID:               id,
			Name:             name,
			WorkspaceDirName: workspace.DirNameFor(name, id),
			WorkspaceMode:    mode,
			WorkspacePath:    path,
			CreatedBy:        &user.ID,
		}
		if path != nil {
			setIdentity(p, ident)
		}
		err = s.insert(ctx, p, user.ID)
		if isDirNameTaken(err) {
			s.log.Warn("a project's folder name is taken by something Atelier did not make", "dir", p.WorkspaceDirName)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.log.Info("project created", "project", p.ID, "mode", p.WorkspaceMode, "dir", p.WorkspaceDirName, "by", user.Username)
		s.publishCanonical(ctx, p)
		return p, nil
	}
	return nil, fmt.Errorf("projects: %d folder names in a row were taken in the workspaces root", maxDirNameTries)
}

// insert writes the project. A Container project's folder and canonical
// repository (its first commit, which git makes) are made first, under
// names derived from the id alone, with no transaction open; the row is
// then written with that commit in one short transaction. So no page ever
// sees a project without its folder or repository, and when the row
// cannot be written (the bound was reached meanwhile, a row holds the
// folder's name) both are removed again. A crash in between leaves a
// folder and a repository no row names, which no later project adopts:
// ids are drawn once, and both creators refuse an existing folder.
func (s *Service) insert(ctx context.Context, p *models.Project, ownerID int64) error {
	// A person at the bound is refused before git runs; the count taken
	// under the lock below is the one that decides.
	created, err := s.store.CreatedProjects(ctx, ownerID)
	if err != nil {
		return err
	}
	if created >= s.maxOwned {
		return ErrTooManyProjects
	}
	madeDir, madeRepo, err := s.makeOwned(ctx, p)
	if err == nil {
		err = s.store.Tx(ctx, func(tx *models.Store) error {
			// Counted under the creator's row lock, so two creations at
			// once cannot both take the last place. Site admins are bound
			// too: a project costs the server a repository and a folder
			// whoever makes it, and the operator raises the bound when
			// needed. What counts is what the person created: ownership
			// others offer takes no place, and giving a project away frees
			// none.
			created, err := tx.CreatedProjectsLocked(ctx, ownerID)
			if err != nil {
				return err
			}
			if created >= s.maxOwned {
				return ErrTooManyProjects
			}
			return tx.CreateProject(ctx, p, ownerID)
		})
	}
	if err != nil {
		// Also when the request ended: what is left would be garbage.
		s.removeOwned(context.WithoutCancel(ctx), p, madeDir, madeRepo)
	}
	return err
}

// makeOwned makes a Container project's managed folder and its canonical
// repository with a first commit, which it records in p, and says which of
// the two it made: only those are removed on failure, never a folder or
// repository that was there before.
func (s *Service) makeOwned(ctx context.Context, p *models.Project) (dir, repo bool, err error) {
	if p.WorkspaceMode != models.ModeContainer {
		return false, false, nil
	}
	if _, err := s.ws.CreateManaged(p.WorkspaceDirName); err != nil {
		return false, false, err
	}
	_, first, err := s.git.CreateCanonical(ctx, CanonicalName(p.ID))
	if err != nil {
		return true, false, err
	}
	p.CanonicalCommit = &first
	return true, true, nil
}

// removeOwned deletes what Atelier keeps on disk for a project.
func (s *Service) removeOwned(ctx context.Context, p *models.Project, dir, repo bool) {
	if dir {
		if err := s.ws.RemoveManaged(p.WorkspaceDirName); err != nil {
			s.log.Error("project folder left behind", "project", p.ID, "dir", p.WorkspaceDirName, "err", err)
		}
	}
	if repo {
		if err := s.git.RemoveRepo(ctx, CanonicalName(p.ID)); err != nil {
			s.log.Error("canonical repository left behind", "project", p.ID, "err", err)
		}
	}
}

// KeepPublished runs PublishPending now and then every interval until ctx
// ends, so a publish that failed while the object store was away (at
// start, after an import, after a release) lands once the store is back,
// without a restart.
func (s *Service) KeepPublished(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.PublishPending(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("publishing pending canonical commits failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PublishPending publishes every canonical commit the object store lacks.
func (s *Service) PublishPending(ctx context.Context) error {
	ps, err := s.store.UnpublishedProjects(ctx)
	if err != nil {
		return err
	}
	for i := range ps {
		s.publishCanonical(ctx, &ps[i])
	}
	return nil
}

// publishCanonical stores the project's canonical tree in the object store.
// A failure only costs speed: reads fall back to git.
func (s *Service) publishCanonical(ctx context.Context, p *models.Project) {
	if p.CanonicalCommit == nil {
		return
	}
	repo, err := s.git.OpenBare(CanonicalName(p.ID))
	if err == nil {
		_, err = s.code.Publish(ctx, repo, *p.CanonicalCommit)
	}
	if err != nil {
		s.log.Warn("canonical commit not published", "project", p.ID, "err", err)
	}
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
	if p.WorkspaceRealPath != nil && p.WorkspaceDev != nil && p.WorkspaceIno != nil {
		loc.Identity = &workspace.Identity{Path: *p.WorkspaceRealPath, Dev: uint64(*p.WorkspaceDev), Ino: uint64(*p.WorkspaceIno)}
	}
	return loc
}

// setIdentity records the admitted folder in the row; dev_t and ino_t are
// unsigned and the columns bigint, so they are kept bit for bit.
func setIdentity(p *models.Project, id workspace.Identity) {
	dev, ino := int64(id.Dev), int64(id.Ino)
	p.WorkspaceRealPath, p.WorkspaceDev, p.WorkspaceIno = &id.Path, &dev, &ino
}

// RecordLocalIdentities adopts the Local projects created before folders'
// identities were recorded; the server runs it at start, before serving.
// Each folder must pass today's creation rules as they apply to the
// project's creator (a creator no longer known counts as not a site
// admin): the guard, the ownership rule and, for everyone but site admins,
// ATELIER_LOCAL_ROOTS. What passes is recorded as it is now; what does not
// stays unrecorded and is never read (409 root_moved) until an operator
// fixes the folder or the setting and restarts. The first error of the
// database is returned; refusals are only logged.
func (s *Service) RecordLocalIdentities(ctx context.Context) error {
	ps, err := s.store.LocalProjectsWithoutIdentity(ctx)
	if err != nil {
		return err
	}
	for i := range ps {
		p := &ps[i]
		admin := false
		if p.CreatedBy != nil {
			u, err := s.store.UserByID(ctx, *p.CreatedBy)
			if err != nil && !errors.Is(err, models.ErrNotFound) {
				return err
			}
			admin = isSiteAdmin(u)
		}
		id, err := s.ws.AdmitLocal(*p.WorkspacePath, admin)
		if err != nil {
			s.log.Error("local project not adopted: its folder fails today's creation rules and will not be read",
				"project", p.ID, "path", *p.WorkspacePath, "err", err)
			continue
		}
		setIdentity(p, id)
		if _, err := s.store.RecordWorkspaceIdentity(ctx, p.ID, id.Path, *p.WorkspaceDev, *p.WorkspaceIno); err != nil {
			return err
		}
		s.log.Info("local project adopted: its folder's identity is recorded", "project", p.ID, "path", id.Path)
	}
	return nil
}

// CodeReady is the Code tab's gate (workspace.CodeReady).
func (s *Service) CodeReady(p *models.Project) error {
	return s.ws.CodeReady(Location(p))
}

// Archive makes the project read-only. Archiving twice is fine. Its open
// edit sessions are paused, not ended: their edits and forks stay, their
// shells close (Shells' heartbeat sees the project archived) and they take
// no change until Unarchive.
func (s *Service) Archive(ctx context.Context, acc *Access) error {
	if err := s.store.ArchiveProject(ctx, acc.Project.ID, s.now()); err != nil {
		return err
	}
	s.forgetProject(ctx, acc.Project.ID)
	s.log.Info("project archived", "project", acc.Project.ID, "by", acc.User.Username)
	return nil
}

// Unarchive makes an archived project active again; unarchiving an active
// one is a no-op. Its owners may, and site admins, members or not (a
// project whose last owner left without an admin to take it has nobody
// else who could); a project admin may archive but not undo it, so an
// archive never takes the project from its owners. The paused sessions
// resume in the same transaction, with the age they had left.
func (s *Service) Unarchive(ctx context.Context, user *models.User, projectID int64) error {
	if user == nil {
		return auth.ErrSignInRequired
	}
	if !isSiteAdmin(user) {
		if _, err := s.Authorize(ctx, user, projectID, auth.ProjectOwn); err != nil {
			return err
		}
	}
	err := s.store.Tx(ctx, func(tx *models.Store) error {
		since, was, err := tx.UnarchiveProject(ctx, projectID)
		if errors.Is(err, models.ErrNotFound) {
			return ErrNotFound
		}
		if err != nil || !was {
			return err
		}
		return s.sessions.ResumeProjectSessions(ctx, tx, projectID, since)
	})
	if err != nil {
		return err
	}
	s.forgetProject(ctx, projectID)
	s.log.Info("project unarchived", "project", projectID, "by", user.Username)
	return nil
}

// Delete removes the project and everything Atelier keeps for it: its
// sessions (their forks and folders), its canonical repository and managed
// folder, its workspace forks, and, through the collector, the objects its
// trees alone held. A Local project's folder belongs to the person and is
// never touched.
func (s *Service) Delete(ctx context.Context, acc *Access) error {
	p := acc.Project
	// Their forks must go while the rows still name them.
	if err := s.sessions.EndProjectSessions(ctx, p.ID, "project_deleted"); err != nil {
		return err
	}
	// While the row still holds the folder's name: a Local project made
	// later under the same name would take its area over.
	if err := s.sessions.EndProject(ctx, p); err != nil {
		s.log.Error("sessions' folders of a deleted project left behind", "project", p.ID, "err", err)
	}
	if err := s.store.DeleteProject(ctx, p.ID); err != nil {
		return err
	}
	s.forgetProject(ctx, p.ID)
	// The row is gone, so what is left on disk is only garbage: a later
	// project never adopts it (both creators refuse an existing folder).
	container := p.WorkspaceMode == models.ModeContainer
	s.removeOwned(ctx, p, container, container)
	s.removeWorkspaceForks(ctx, p)
	// Its trees are dead now; what no other tree shares goes once it is
	// older than the collector's grace.
	s.code.CollectSoon()
	s.log.Info("project deleted", "project", p.ID, "by", acc.User.Username)
	return nil
}

// SetSandboxNetwork decides whether commands of the project reach the
// network. The default, deny, gives them only a loopback of their own.
func (s *Service) SetSandboxNetwork(ctx context.Context, acc *Access, network string) error {
	if network != "deny" && network != "allow" {
		return ErrBadNetwork
	}
	if err := s.store.SetSandboxNetwork(ctx, acc.Project.ID, network); err != nil {
		return err
	}
	s.log.Info("sandbox network set", "project", acc.Project.ID, "network", network, "by", acc.User.Username)
	return nil
}
