package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/editsession"
	"atelier/models"
	"atelier/projects"
	"atelier/terminal"
	"atelier/views"
	"atelier/workbench"
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
	sess, err := h.shellSession(c, true)
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

// sharesView is the panel where a terminal's owner shares it read-only.
type sharesView struct {
	Base     string // the session's URL
	Terminal string
	List     []workbench.Share
	Problem  *views.Problem
}

func (v sharesView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return v.List
}

// WatchURL is where a person the terminal is shared with watches it.
func (v sharesView) WatchURL() string {
	return views.URL(v.Base, "terminals", v.Terminal, "watch").String()
}

// Shares lists who may watch the shell, and who watches now.
func (h *EditSessions) Shares(c *gin.Context) error {
	return h.answerShares(c, nil)
}

// Share lets a member of the project watch the shell, read-only.
func (h *EditSessions) Share(c *gin.Context) error {
	sess, err := h.shellSession(c, true)
	if err != nil {
		return err
	}
	with, err := h.Projects.Member(c.Request.Context(), sess.ProjectID, c.PostForm("username"))
	if err == nil {
		err = h.Shells.ShareShell(c.Request.Context(), sess, c.Param("tid"), with)
	}
	return h.answerShares(c, err)
}

// Unshare revokes a person's share; their open watch ends at once.
func (h *EditSessions) Unshare(c *gin.Context) error {
	sess, err := h.shellSession(c, true)
	if err != nil {
		return err
	}
	userID, err := strconv.ParseInt(c.Param("uid"), 10, 64)
	if err != nil {
		return terminal.ErrNotFound
	}
	return h.answerShares(c, h.Shells.UnshareShell(c.Request.Context(), sess, c.Param("tid"), userID))
}

// answerShares answers with the shares panel, the refusal of a change in it.
func (h *EditSessions) answerShares(c *gin.Context, changeErr error) error {
	status, prob, err := panelProblem(c, changeErr)
	if err != nil {
		return err
	}
	sess, err := h.shellSession(c, false)
	if err != nil {
		return err
	}
	list, err := h.Shells.Shares(c.Request.Context(), sess, c.Param("tid"))
	if err != nil {
		return err
	}
	return h.Render.Render(c, status, "partials/terminal_shares",
		sharesView{Base: base(sess), Terminal: c.Param("tid"), List: list, Problem: prob})
}

// watchView is the page of a terminal shared with the person who watches.
type watchView struct {
	ProjectID int64
	Stream    string
	Owner     string
	Heartbeat int64
}

// Watch is the page where a person watches a terminal shared with them.
func (h *EditSessions) Watch(c *gin.Context) error {
	acc, lease, err := h.watched(c)
	if err != nil {
		return err
	}
	stream := views.URL("/projects", acc.Project.ID, "sessions", c.Param("sid"), "terminals", c.Param("tid"), "watch", "stream").String()
	return h.Render.Render(c, http.StatusOK, "watch",
		watchView{ProjectID: acc.Project.ID, Stream: stream, Owner: lease.Owner, Heartbeat: h.Heartbeat.Milliseconds()})
}

// WatchStream streams a shared terminal's output to a person who watches
// it; it ends when the owner revokes the share.
func (h *EditSessions) WatchStream(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	return h.Shells.ServeWatch(c.Writer, c.Request, acc.User, acc.Project.ID, c.Param("sid"), c.Param("tid"))
}

// ToWatchHolder hands a watcher's request to the instance that runs the
// shell, as ToHolder does for its owner's.
func (h *EditSessions) ToWatchHolder(c *gin.Context) error {
	if h.Forward == nil || h.Forward.Forwarded(c.Request) {
		return nil
	}
	_, lease, err := h.watched(c)
	if err != nil {
		return err
	}
	address, err := h.Runtime.HolderOf(c.Request.Context(), lease.SessionID)
	if err != nil || address == "" {
		return err
	}
	h.Forward.Forward(c, address)
	c.Abort()
	return nil
}

// watched is the shell of the URL when it is shared with the caller, who
// may read the project.
func (h *EditSessions) watched(c *gin.Context) (*projects.Access, *models.SharedTerminal, error) {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return nil, nil, err
	}
	lease, err := h.Shells.SharedShell(c.Request.Context(), acc.User, c.Param("sid"), c.Param("tid"))
	if err != nil {
		return nil, nil, err
	}
	return acc, lease, nil
}

// shellSession is the caller's session of a URL that names one of its
// shells: a person who only watches that shell is told so (ErrWatchOnly).
func (h *EditSessions) shellSession(c *gin.Context, touch bool) (*editsession.Session, error) {
	sess, err := h.session(c, touch)
	if err != nil {
		return nil, h.watchOnly(c, err)
	}
	return sess, nil
}

// watchOnly turns the refusal of a session that is not the caller's into
// ErrWatchOnly when the caller watches the terminal of the URL: they know
// it exists, and are told why they may not type into it.
func (h *EditSessions) watchOnly(c *gin.Context, err error) error {
	if !errors.Is(err, editsession.ErrNotFound) || c.Param("tid") == "" || auth.User(c) == nil {
		return err
	}
	if _, werr := h.Shells.SharedShell(c.Request.Context(), auth.User(c), c.Param("sid"), c.Param("tid")); werr == nil {
		return workbench.ErrWatchOnly
	}
	return err
}
