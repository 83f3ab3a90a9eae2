package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
	"atelier/views"
)

// membersView is the members panel of the project page.
type membersView struct {
	ProjectID int64
	List      []models.ProjectMember
	CanManage bool
	CanOwn    bool
	Problem   *views.Problem
}

func (v membersView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return v.List
}

// AddMember adds a person to the project or changes their role.
func (h *Projects) AddMember(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	err = h.Projects.SetMember(c.Request.Context(), acc, c.PostForm("username"), auth.Role(c.PostForm("role")))
	return h.answerMembers(c, acc, err)
}

// RemoveMember takes a person out of the project.
func (h *Projects) RemoveMember(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	err = h.Projects.RemoveMember(c.Request.Context(), acc, c.Param("user"))
	return h.answerMembers(c, acc, err)
}

// answerMembers answers a change of membership: the refreshed panel for
// htmx (with the refusal in it), the list for JSON, the page for a form.
func (h *Projects) answerMembers(c *gin.Context, acc *projects.Access, changeErr error) error {
	var prob *views.Problem
	status := http.StatusOK
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
	return h.Render.Render(c, status, "partials/members", v)
}

func (h *Projects) members(c *gin.Context, acc *projects.Access, prob *views.Problem) (membersView, error) {
	list, err := h.Projects.Members(c.Request.Context(), acc)
	if err != nil {
		return membersView{}, err
	}
	return membersView{
		ProjectID: acc.Project.ID,
		List:      list,
		CanManage: acc.Can(auth.ProjectManage),
		CanOwn:    acc.Can(auth.ProjectOwn),
		Problem:   prob,
	}, nil
}
