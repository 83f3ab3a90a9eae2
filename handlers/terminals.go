package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/terminal"
)

type terminalJSON struct {
	ID      string `json:"id"`
	NextSeq uint64 `json:"nextSeq"`
}

func termJSON(t *terminal.Terminal) terminalJSON {
	return terminalJSON{ID: t.ID(), NextSeq: t.NextSeq()}
}

// OpenTerminal starts an interactive shell in the session. The shell slots
// are taken before the request is read or anything is prepared.
func (h *EditSessions) OpenTerminal(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	slot, err := h.Shells.ReserveShell(auth.User(c))
	if err != nil {
		return err
	}
	cols, rows := formInt(c, "cols"), formInt(c, "rows")
	t, err := h.Shells.OpenShell(c.Request.Context(), sess, slot, cols, rows)
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, termJSON(t))
	return nil
}

// Terminals lists the session's live shells, so a reloaded page reattaches.
func (h *EditSessions) Terminals(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	list := []terminalJSON{}
	for _, t := range h.Shells.Shells(sess) {
		list = append(list, termJSON(t))
	}
	c.JSON(http.StatusOK, list)
	return nil
}

// Stream sends the shell's output as Server-Sent Events from the byte the
// viewer asks for. A shell that ended with an earlier server process
// answers with its exit, so the page stops waiting for it.
func (h *EditSessions) Stream(c *gin.Context) error {
	// A viewer's stream is not activity: no use is noted.
	if t, ok := h.ownShell(c, time.Time{}); ok {
		return t.ServeStream(c.Writer, c.Request)
	}
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	t, err := h.Shells.Shell(sess, c.Param("tid"))
	if errors.Is(err, terminal.ErrNotFound) && h.Shells.EndedShell(c.Request.Context(), sess, c.Param("tid")) {
		c.Header("Content-Type", "text/event-stream")
		c.Header("Cache-Control", "no-store")
		c.String(http.StatusOK, "event: exit\ndata: {\"code\":-1,\"signal\":\"\",\"lost\":true}\n\n")
		return nil
	}
	if err != nil {
		return err
	}
	return t.ServeStream(c.Writer, c.Request)
}

// Input queues keystrokes, applied in the order of X-Input-Seq.
func (h *EditSessions) Input(c *gin.Context) error {
	t, err := h.terminal(c)
	if err != nil {
		return err
	}
	return t.ServeInput(c.Writer, c.Request)
}

// Resize sets the shell's window.
func (h *EditSessions) Resize(c *gin.Context) error {
	t, err := h.terminal(c)
	if err != nil {
		return err
	}
	if err := t.Resize(formInt(c, "cols"), formInt(c, "rows")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// CloseTerminal kills the shell and everything it started.
func (h *EditSessions) CloseTerminal(c *gin.Context) error {
	t, err := h.terminal(c)
	if err != nil {
		return err
	}
	if err := t.Close(); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// terminal finds a running shell of the caller's own session for input,
// resize or close. These come with every keystroke, so they are answered
// from memory (ownShell) and the session's activity is written by the next
// lease heartbeat; only a request that does not match goes through the full
// check, for its exact answer.
func (h *EditSessions) terminal(c *gin.Context) (*terminal.Terminal, error) {
	now := h.Now()
	if t, ok := h.ownShell(c, now); ok {
		h.deadlines(c, now.Add(h.Idle))
		return t, nil
	}
	sess, err := h.session(c, true)
	if err != nil {
		return nil, err
	}
	return h.Shells.Shell(sess, c.Param("tid"))
}

// ownShell is the running shell of the URL when it belongs to the caller's
// own session and the caller may still edit the project, both from memory
// once warm: the membership as projects.Permit remembers it, the shell's
// owner as its terminal records it. A use at active (zero for none) counts
// as the session's activity.
func (h *EditSessions) ownShell(c *gin.Context, active time.Time) (*terminal.Terminal, bool) {
	pid, err := projectID(c)
	if err != nil {
		return nil, false
	}
	user := auth.User(c)
	if h.Projects.Permit(c.Request.Context(), user, pid, auth.CodeEdit) != nil {
		return nil, false
	}
	return h.Shells.Owned(user, pid, c.Param("sid"), c.Param("tid"), active)
}

// formInt reads a whole number from the form or the query; 0 when absent
// or malformed, which the terminal refuses or defaults.
func formInt(c *gin.Context, name string) int {
	n, err := strconv.Atoi(c.PostForm(name))
	if err != nil {
		n, _ = strconv.Atoi(c.Query(name))
	}
	return n
}
