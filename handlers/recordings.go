package handlers

import (
	"io"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
	"atelier/views"
)

// recordingsView lists the recordings of a session's owner, or those shared
// with a project.
type recordingsView struct {
	List    []recordingRow
	Problem *views.Problem
}

func (v recordingsView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	list := make([]models.TerminalRecording, len(v.List))
	for i, r := range v.List {
		list[i] = r.TerminalRecording
	}
	return list
}

// recordingRow is a recording as a list shows it: Owned ones have the
// owner's buttons.
type recordingRow struct {
	models.TerminalRecording
	Owned bool
}

// recordingRows are the rows of recs as user sees them.
func recordingRows(recs []models.TerminalRecording, user *models.User) []recordingRow {
	rows := make([]recordingRow, len(recs))
	for i, r := range recs {
		rows[i] = recordingRow{TerminalRecording: r, Owned: r.UserID == user.ID}
	}
	return rows
}

// StartRecording starts recording the caller's shell.
func (h *EditSessions) StartRecording(c *gin.Context) error {
	sess, err := h.shellSession(c, true)
	if err != nil {
		return err
	}
	_, err = h.Recordings.Start(c.Request.Context(), sess, c.Param("tid"))
	return h.answerRecordings(c, err)
}

// StopRecording ends the recording of the caller's shell; the answer comes
// once it is stored.
func (h *EditSessions) StopRecording(c *gin.Context) error {
	sess, err := h.shellSession(c, true)
	if err != nil {
		return err
	}
	return h.answerRecordings(c, h.Recordings.Stop(c.Request.Context(), sess, c.Param("tid")))
}

// SessionRecordings lists the recordings the caller made in the session.
func (h *EditSessions) SessionRecordings(c *gin.Context) error {
	return h.answerRecordings(c, nil)
}

// panelProblem is how a panel that a change refreshes answers the change's
// refusal: within the panel (its status, and the problem it shows) when a
// page's script or an API client asked; as the error itself, a page or
// JSON, otherwise and for a failure of the server's.
func panelProblem(c *gin.Context, changeErr error) (int, *views.Problem, error) {
	if changeErr == nil {
		return http.StatusOK, nil, nil
	}
	prob := ProblemOf(changeErr)
	if prob.Status >= 500 || !views.IsHTMX(c.Request) && !views.WantsJSON(c.Request) {
		return 0, nil, changeErr
	}
	return prob.Status, prob, nil
}

// answerRecordings answers with the session's recordings, the refusal of
// a change to them.
func (h *EditSessions) answerRecordings(c *gin.Context, changeErr error) error {
	status, prob, err := panelProblem(c, changeErr)
	if err != nil {
		return err
	}
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	list, err := h.Recordings.Of(c.Request.Context(), sess)
	if err != nil {
		return err
	}
	return h.Render.Render(c, status, "partials/session_recordings", recordingsView{List: recordingRows(list, auth.User(c)), Problem: prob})
}

// recordingView is the page that plays a recording.
type recordingView struct {
	Recording *models.TerminalRecording
	Mine      bool
}

func (v recordingView) JSON() any { return v.Recording }

// Recording is the page that plays a recording: the owner's own, or one
// shared with the project.
func (h *EditSessions) Recording(c *gin.Context) error {
	acc, rec, err := h.recording(c)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "recording", recordingView{Recording: rec, Mine: rec.UserID == acc.User.ID})
}

// RecordingCast sends a recording's asciicast file, as a download unless
// ?play is given.
func (h *EditSessions) RecordingCast(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	id, err := recordingID(c)
	if err != nil {
		return err
	}
	rec, body, err := h.Recordings.Open(c.Request.Context(), acc.User, acc.Project.ID, id)
	if err != nil {
		return err
	}
	defer body.Close()
	hdr := c.Writer.Header()
	hdr.Set("Content-Type", "application/x-asciicast")
	hdr.Set("Content-Length", strconv.FormatInt(rec.Bytes, 10))
	hdr.Set("Cache-Control", "private, max-age=3600") // a saved recording never changes
	hdr.Set("X-Content-Type-Options", "nosniff")
	if _, play := c.GetQuery("play"); !play {
		hdr.Set("Content-Disposition", `attachment; filename="recording-`+strconv.FormatInt(rec.ID, 10)+`.cast"`)
	}
	c.Status(http.StatusOK)
	_, err = io.Copy(c.Writer, body)
	return err
}

// ShareRecording shares one of the caller's recordings with the project
// (shared=true), or stops sharing it.
func (h *EditSessions) ShareRecording(c *gin.Context) error {
	acc, rec, err := h.recording(c)
	if err != nil {
		return err
	}
	shared, _ := strconv.ParseBool(c.PostForm("shared"))
	if err := h.Recordings.Share(c.Request.Context(), acc.User, rec.ID, shared); err != nil {
		return err
	}
	c.Header("HX-Trigger", "recordings")
	c.Status(http.StatusNoContent)
	return nil
}

// DeleteRecording deletes one of the caller's finished recordings.
func (h *EditSessions) DeleteRecording(c *gin.Context) error {
	acc, rec, err := h.recording(c)
	if err != nil {
		return err
	}
	if err := h.Recordings.Delete(c.Request.Context(), acc.User, rec.ID); err != nil {
		return err
	}
	c.Header("HX-Trigger", "recordings")
	c.Status(http.StatusNoContent)
	return nil
}

// recording is the recording of the URL, when the caller reads the project
// and may see it.
func (h *EditSessions) recording(c *gin.Context) (*projects.Access, *models.TerminalRecording, error) {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return nil, nil, err
	}
	id, err := recordingID(c)
	if err != nil {
		return nil, nil, err
	}
	rec, err := h.Recordings.Get(c.Request.Context(), acc.User, acc.Project.ID, id)
	if err != nil {
		return nil, nil, err
	}
	return acc, rec, nil
}

// recordingID reads the :rid of a recording URL; a malformed one is a
// recording that does not exist.
func recordingID(c *gin.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("rid"), 10, 64)
	if err != nil || id <= 0 {
		return 0, models.ErrNotFound
	}
	return id, nil
}
