package handlers

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
	"atelier/views"
)

// membersView is the members panel of the project page, with the offers of
// ownership still waiting for an answer.
type membersView struct {
	ProjectID int64
	List      []models.ProjectMember
	Invited   []models.InvitedOwner
	CanManage bool
	CanOwn    bool
	Problem   *views.Problem
	Notice    string // what the last change did, when it is not plain
}

func (v membersView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return v.List
}

// AddMember adds a person to the project or changes their role; the owner
// role is offered instead (202 for JSON): the person accepts it on their
// projects page.
func (h *Projects) AddMember(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	username := c.PostForm("username")
	change, err := h.Projects.SetMember(c.Request.Context(), acc, username, auth.Role(c.PostForm("role")))
	if err == nil && change == projects.OwnerInvited {
		return h.answerMembers(c, acc, http.StatusAccepted,
			"Ownership is offered to "+username+": they become an owner once they accept it on their projects page.", nil)
	}
	return h.answerMembers(c, acc, http.StatusOK, "", err)
}

// RemoveMember takes a person out of the project.
func (h *Projects) RemoveMember(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	err = h.Projects.RemoveMember(c.Request.Context(), acc, c.Param("user"))
	return h.answerMembers(c, acc, http.StatusOK, "", err)
}

// WithdrawInvitation takes back an offer of ownership.
func (h *Projects) WithdrawInvitation(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	err = h.Projects.WithdrawInvitation(c.Request.Context(), acc, c.Param("user"))
	return h.answerMembers(c, acc, http.StatusOK, "", err)
}

// answerMembers answers a change of membership: the refreshed panel for
// htmx (with the refusal or the notice in it), the list for JSON, the page
// for a form.
func (h *Projects) answerMembers(c *gin.Context, acc *projects.Access, status int, notice string, changeErr error) error {
	var prob *views.Problem
	if changeErr != nil {
		prob = ProblemOf(changeErr)
		if prob.Status >= 500 {
			return changeErr
		}
		status = prob.Status
	}
	if !views.IsHTMX(c.Request) && !views.WantsJSON(c.Request) {
		if changeErr != nil {
			return changeErr
		}
		views.Redirect(c, views.URL("/projects", acc.Project.ID).String())
		return nil
	}
	v, err := h.members(c, acc, prob)
	if err != nil {
		return err
	}
	v.Notice = notice
	return h.Render.Render(c, status, "partials/members", v)
}

func (h *Projects) members(c *gin.Context, acc *projects.Access, prob *views.Problem) (membersView, error) {
	ctx := c.Request.Context()
	list, err := h.Projects.Members(ctx, acc)
	if err != nil {
		return membersView{}, err
	}
	invited, err := h.Projects.InvitationsOf(ctx, acc)
	if err != nil {
		return membersView{}, err
	}
	return membersView{
		ProjectID: acc.Project.ID,
		List:      list,
		Invited:   invited,
		CanManage: acc.Can(auth.ProjectManage),
		CanOwn:    acc.Can(auth.ProjectOwn),
		Problem:   prob,
	}, nil
}

// Leave takes the caller out of the project: browsers go to their
// projects; JSON gets who owns it now, or that it was archived.
func (h *Projects) Leave(c *gin.Context) error {
	id, err := projectID(c)
	if err != nil {
		return err
	}
	d, err := h.Projects.Leave(c.Request.Context(), auth.User(c), id)
	if err != nil {
		return err
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusOK, gin.H{"heir": d.Heir, "archived": d.Archived})
		return nil
	}
	views.Redirect(c, "/projects")
	return nil
}

// AcceptInvitation makes the caller an owner of the project that offered
// it; DeclineInvitation turns the offer down. htmx gets the projects page
// again with what happened said on it; a form is sent back to it; JSON
// gets 204.
func (h *Projects) AcceptInvitation(c *gin.Context) error {
	return h.answerInvitation(c, h.Projects.AcceptInvitation, "You are now an owner of the project.")
}

// DeclineInvitation: see AcceptInvitation.
func (h *Projects) DeclineInvitation(c *gin.Context) error {
	return h.answerInvitation(c, h.Projects.DeclineInvitation, "You declined the invitation; nothing changed.")
}

func (h *Projects) answerInvitation(c *gin.Context, answer func(context.Context, *models.User, int64) error, notice string) error {
	id, err := projectID(c)
	if err != nil {
		return err
	}
	user := auth.User(c)
	if err := answer(c.Request.Context(), user, id); err != nil {
		return err
	}
	switch {
	case views.WantsJSON(c.Request):
		c.Status(http.StatusNoContent)
		return nil
	case views.IsHTMX(c.Request):
		v, err := h.projectsView(c, user)
		if err != nil {
			return err
		}
		v.Notice = notice
		return h.Render.Render(c, http.StatusOK, "projects", v)
	}
	views.Redirect(c, "/projects")
	return nil
}
