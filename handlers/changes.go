package handlers

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/changes"
	"atelier/code"
	"atelier/events"
	"atelier/models"
	"atelier/projects"
	"atelier/views"
)

// Changes are a project's Changes: submit, the list and one Change's page,
// approve, release, withdraw, the settings with the check command, and the
// Code page's single-file edit.
type Changes struct {
	Render   *views.Renderer
	Projects *projects.Service
	Changes  *changes.Service
	Code     *code.Service
	Events   *events.Recorder
}

type changeCreated struct {
	ChangeID int64  `json:"changeId"`
	Status   string `json:"status"`
}

// Submit turns the caller's session into one Change: 201, or 200 for a
// repeat, with {changeId}; browsers go to the Change's page.
func (h *Changes) Submit(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeEdit)
	if err != nil {
		return err
	}
	ch, created, err := h.Changes.Submit(c.Request.Context(), acc, c.Param("sid"), c.PostForm("message"))
	if err != nil {
		return err
	}
	return h.answerChange(c, ch, created)
}

// Rebase moves the caller's session onto the current canonical, carrying
// the edits canonical did not touch, and opens the new session's page.
func (h *Changes) Rebase(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeEdit)
	if err != nil {
		return err
	}
	next, dropped, err := h.Changes.Rebase(c.Request.Context(), acc, c.Param("sid"))
	if err != nil {
		return err
	}
	if dropped == nil {
		dropped = []string{}
	}
	return answerMade(c, views.URL("/projects", next.ProjectID, "sessions", next.ID).String(), true,
		gin.H{"id": next.ID, "baseCommit": next.BaseCommit, "dropped": dropped})
}

// answerChange answers a new or found Change: JSON for clients, its page
// for browsers.
func (h *Changes) answerChange(c *gin.Context, ch *models.Change, created bool) error {
	return answerMade(c, changeURL(ch), created, changeCreated{ChangeID: ch.ID, Status: ch.Status})
}

func changeURL(ch *models.Change) string {
	return views.URL("/projects", ch.ProjectID, "changes", ch.ID).String()
}

type changeListView struct {
	Project *models.Project
	Role    auth.Role
	Changes []models.Change
}

func (v changeListView) JSON() any { return v.Changes }

// List shows the project's Changes to every member.
func (h *Changes) List(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	cs, err := h.Changes.List(c.Request.Context(), acc)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "changes", changeListView{Project: acc.Project, Role: acc.Role, Changes: cs})
}

type changeView struct {
	Project  *models.Project
	Detail   *changes.Detail
	Diffs    []changes.FileDiff
	CanEdit  bool // approve, release
	IsAuthor bool // withdraw
	// OthersApprove: the viewer wrote it and someone else must approve it.
	OthersApprove bool
	SideBySide    bool
}

func (v changeView) JSON() any { return v.Detail }

// Show is one Change: its diff, evidence and timeline; JSON gives status,
// base, commit, paths and evidence.
func (h *Changes) Show(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	id, err := changeID(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	d, err := h.Changes.Get(ctx, acc, id)
	if err != nil {
		return err
	}
	v := changeView{Project: acc.Project, Detail: d, CanEdit: acc.Can(auth.CodeEdit),
		IsAuthor: d.AuthorID != nil && *d.AuthorID == acc.User.ID, SideBySide: c.Query("view") == "split"}
	if v.OthersApprove, err = h.Changes.OthersApprove(ctx, acc, d.Change); err != nil {
		return err
	}
	if !views.WantsJSON(c.Request) {
		if v.Diffs, err = h.Changes.Diffs(ctx, acc, d.Change); err != nil {
			return err
		}
	}
	return h.Render.Render(c, http.StatusOK, "change", v)
}

// Status is the live part of a Change's page: its status, evidence and
// timeline, fetched again on each of its events.
func (h *Changes) Status(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	id, err := changeID(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	d, err := h.Changes.Get(ctx, acc, id)
	if err != nil {
		return err
	}
	v := changeView{Project: acc.Project, Detail: d,
		CanEdit: acc.Can(auth.CodeEdit), IsAuthor: d.AuthorID != nil && *d.AuthorID == acc.User.ID}
	if v.OthersApprove, err = h.Changes.OthersApprove(ctx, acc, d.Change); err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/change_status", v)
}

// Approve, Release and Withdraw move a Change; browsers return to its page.
func (h *Changes) Approve(c *gin.Context) error  { return h.move(c, h.Changes.Approve) }
func (h *Changes) Release(c *gin.Context) error  { return h.move(c, h.Changes.Release) }
func (h *Changes) Withdraw(c *gin.Context) error { return h.move(c, h.Changes.Withdraw) }

func (h *Changes) move(c *gin.Context, fn func(ctx context.Context, acc *projects.Access, id int64) (*models.Change, error)) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	id, err := changeID(c)
	if err != nil {
		return err
	}
	ch, err := fn(c.Request.Context(), acc, id)
	if err != nil {
		return err
	}
	if !views.WantsJSON(c.Request) {
		views.Redirect(c, changeURL(ch))
		return nil
	}
	status := http.StatusOK
	if c.FullPath() == "/projects/:id/changes/:cid/release" && ch.Status != models.ChangeReleased {
		status = http.StatusAccepted // composed again on the new canonical, or waiting
	}
	c.JSON(status, gin.H{"changeId": ch.ID, "status": ch.Status, "waitReason": ch.WaitReason, "commit": ch.CommitSHA})
	return nil
}

// Stream is the project's live events for its members' pages (SSE).
func (h *Changes) Stream(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	return h.Events.ServeStream(c.Writer, c.Request, events.ProjectStream(acc.Project.ID))
}

type settingsView struct {
	Project  *models.Project
	Settings changes.Settings
	CanEdit  bool
	Saved    bool
}

func (v settingsView) JSON() any { return v.Settings }

// Settings shows the project's settings; members read them.
func (h *Changes) Settings(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "settings", settingsView{Project: acc.Project,
		Settings: h.Changes.SettingsOf(acc), CanEdit: acc.Can(auth.CodeEdit), Saved: c.Query("saved") != ""})
}

// SaveSettings records the check command (owners and admins).
func (h *Changes) SaveSettings(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	in := changes.Settings{CheckCommand: c.PostForm("checkCommand")}
	if err := h.Changes.SetSettings(c.Request.Context(), acc, in); err != nil {
		return err
	}
	if !views.WantsJSON(c.Request) {
		views.Redirect(c, views.URL("/projects", acc.Project.ID, "settings").String()+"?saved=1")
		return nil
	}
	c.JSON(http.StatusOK, h.Changes.SettingsOf(acc))
	return nil
}

// EditFile saves one file as a one-file Change, for scripts (owners and
// admins): content is the file's new text exactly, base the commit it was
// read from. People edit in their session's workbench, which the Code
// page's "Edit this file" opens.
func (h *Changes) EditFile(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeEdit)
	if err != nil {
		return err
	}
	ch, err := h.Changes.EditFile(c.Request.Context(), acc, c.PostForm("path"), []byte(c.PostForm("content")), c.PostForm("base"), c.PostForm("message"))
	if err != nil {
		return err
	}
	return h.answerChange(c, ch, true)
}

// changeID reads the :cid of a Change URL; a malformed one does not exist.
func changeID(c *gin.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("cid"), 10, 64)
	if err != nil || id <= 0 {
		return 0, changes.ErrNotFound
	}
	return id, nil
}
