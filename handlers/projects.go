package handlers

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/views"
	"atelier/workbench"
	"atelier/workspace"
)

// Projects is the projects list, creation and the project page.
type Projects struct {
	Render   *views.Renderer
	Projects *projects.Service
	Meter    *meter.Meter // the warning at 80 % and 95 % of the sandbox cap
	// Recordings lists the terminal recordings shared with a project.
	Recordings *workbench.Recordings
}

// projectsView is the projects page: the caller's projects and the offers
// of ownership waiting for their answer.
type projectsView struct {
	Projects    []models.MemberProject
	Invitations []models.PendingInvitation
	Notice      string // what the caller's last answer did
}

func (v projectsView) JSON() any { return v.Projects }

// List shows the caller's projects.
func (h *Projects) List(c *gin.Context) error {
	v, err := h.projectsView(c, auth.User(c))
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "projects", v)
}

func (h *Projects) projectsView(c *gin.Context, user *models.User) (projectsView, error) {
	ctx := c.Request.Context()
	ps, err := h.Projects.List(ctx, user)
	if err != nil {
		return projectsView{}, err
	}
	invs, err := h.Projects.Invitations(ctx, user)
	if err != nil {
		return projectsView{}, err
	}
	return projectsView{Projects: ps, Invitations: invs}, nil
}

// newProjectView is the creation form, refilled with what was typed when
// creation is refused.
type newProjectView struct {
	Name, Mode, Path string
	Problem          *views.Problem
	Check            *pathCheckView
	Local            workspace.LocalOffer // where this person may make a Local project
}

func (v newProjectView) JSON() any { return v.Problem }

// New renders the creation form.
func (h *Projects) New(c *gin.Context) error {
	return h.Render.Render(c, http.StatusOK, "project_new",
		newProjectView{Mode: models.ModeContainer, Local: h.Projects.LocalOffer(auth.User(c))})
}

// Create makes a project: 303 to its page, or 201 with it for JSON.
func (h *Projects) Create(c *gin.Context) error {
	in := projects.CreateInput{Name: c.PostForm("name"), Mode: c.PostForm("mode"), Path: c.PostForm("path")}
	p, err := h.Projects.Create(c.Request.Context(), auth.User(c), in)
	if err != nil {
		prob := ProblemOf(err)
		if prob.Status >= 500 {
			return err
		}
		v := newProjectView{Name: in.Name, Mode: in.Mode, Path: in.Path, Problem: prob, Local: h.Projects.LocalOffer(auth.User(c))}
		var pe *workspace.PathError
		if errors.As(err, &pe) {
			v.Check = pathCheckOf(err)
		}
		return h.Render.Render(c, prob.Status, "project_new", v)
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusCreated, p)
		return nil
	}
	views.Redirect(c, views.URL("/projects", p.ID).String())
	return nil
}

// pathCheckView is the live verdict on a typed Local folder.
type pathCheckView struct {
	OK      bool   `json:"ok"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Hint    string `json:"hint,omitempty"`
}

func pathCheckOf(err error) *pathCheckView {
	if err == nil {
		return &pathCheckView{OK: true}
	}
	p := ProblemOf(err)
	return &pathCheckView{Reason: p.Reason, Message: p.Message, Hint: p.Hint}
}

// ValidatePath runs the Local creation guard on a typed folder; it answers
// 200 either way, since a refused path is the answer and not a failure.
func (h *Projects) ValidatePath(c *gin.Context) error {
	path := c.PostForm("path")
	if projects.NormalizePath(path) == "" {
		return h.Render.Render(c, http.StatusOK, "partials/path_check", &pathCheckView{})
	}
	err := h.Projects.CheckLocalPath(auth.User(c), path)
	var pe *workspace.PathError
	if err != nil && !errors.As(err, &pe) {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/path_check", pathCheckOf(err))
}

// projectView is the project page.
type projectView struct {
	Project      *models.Project
	Role         auth.Role
	CodeReady    bool
	CodeNotReady string
	CanManage    bool
	CanDelete    bool
	CanUnarchive bool // owners and site admins
	LastOwner    bool // leaving passes the project on, or archives it
	Members      membersView
	Usage        meter.Usage
	Recordings   []recordingRow // shared with the project
}

func (v projectView) JSON() any {
	return gin.H{"project": v.Project, "role": v.Role, "codeReady": v.CodeReady, "members": v.Members.List, "invited": v.Members.Invited}
}

// Show renders the project page.
func (h *Projects) Show(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	members, err := h.members(c, acc, nil)
	if err != nil {
		return err
	}
	v := projectView{
		Project:      acc.Project,
		Role:         acc.Role,
		CanManage:    acc.Can(auth.ProjectManage),
		CanDelete:    acc.Can(auth.ProjectOwn),
		CanUnarchive: acc.Can(auth.ProjectOwn) || acc.User.IsAdmin,
		Members:      members,
	}
	if acc.Role == auth.RoleOwner {
		owners := 0
		for _, m := range members.List {
			if m.Role == models.RoleOwner {
				owners++
			}
		}
		v.LastOwner = owners == 1
	}
	if v.Usage, err = h.Meter.Usage(c.Request.Context(), acc.Project.ID); err != nil {
		return err
	}
	shared, err := h.Recordings.Shared(c.Request.Context(), acc.Project.ID)
	if err != nil {
		return err
	}
	v.Recordings = recordingRows(shared, acc.User)
	if err := h.Projects.CodeReady(acc.Project); err != nil {
		v.CodeNotReady = ProblemOf(err).Message
	} else {
		v.CodeReady = true
	}
	return h.Render.Render(c, http.StatusOK, "project", v)
}

// Archive makes the project read-only.
func (h *Projects) Archive(c *gin.Context) error {
	return h.manage(c, h.Projects.Archive)
}

// Unarchive makes an archived project active again (owners and site
// admins). A site admin who is not a member returns to the dashboard,
// where they pressed it.
func (h *Projects) Unarchive(c *gin.Context) error {
	id, err := projectID(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	user := auth.User(c)
	if err := h.Projects.Unarchive(ctx, user, id); err != nil {
		return err
	}
	if views.WantsJSON(c.Request) {
		c.Status(http.StatusNoContent)
		return nil
	}
	if _, err := h.Projects.Authorize(ctx, user, id, auth.CodeRead); err != nil {
		views.Redirect(c, "/admin")
		return nil
	}
	views.Redirect(c, views.URL("/projects", id).String())
	return nil
}

// SetNetwork sets whether the project's sandbox reaches the network.
func (h *Projects) SetNetwork(c *gin.Context) error {
	return h.manage(c, func(ctx context.Context, acc *projects.Access) error {
		return h.Projects.SetSandboxNetwork(ctx, acc, c.PostForm("network"))
	})
}

// manage runs a change that needs project.manage, then answers 204 to JSON
// clients and sends browsers back to the project page.
func (h *Projects) manage(c *gin.Context, change func(context.Context, *projects.Access) error) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	if err := change(c.Request.Context(), acc); err != nil {
		return err
	}
	if views.WantsJSON(c.Request) {
		c.Status(http.StatusNoContent)
		return nil
	}
	views.Redirect(c, views.URL("/projects", acc.Project.ID).String())
	return nil
}

// Delete removes the project and what Atelier keeps for it.
func (h *Projects) Delete(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectOwn)
	if err != nil {
		return err
	}
	if err := h.Projects.Delete(c.Request.Context(), acc); err != nil {
		return err
	}
	if views.IsHTMX(c.Request) {
		views.Redirect(c, "/projects")
		return nil
	}
	c.Status(http.StatusNoContent)
	return nil
}
