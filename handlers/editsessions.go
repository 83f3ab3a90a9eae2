package handlers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/code"
	"atelier/editsession"
	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/search"
	"atelier/views"
	"atelier/workbench"
	"atelier/workspace"
)

// EditSessions is an owner's or admin's edit session: the page, the file
// API the editor uses, changes, diffs, discard and keepalive.
type EditSessions struct {
	Render   *views.Renderer
	Projects *projects.Service
	Sessions *editsession.Sessions
	Runtime  *workbench.Runtime
	Shells   *workbench.Shells
	// Recordings are the owners' recordings of their shells.
	Recordings *workbench.Recordings
	Idle       time.Duration
	// Now is the clock the sessions' limits run on; the page's countdown
	// follows it.
	Now func() time.Time
	// CommandHint is the command box's example, one that works in the
	// sandbox of this host.
	CommandHint string
	// Forward hands a request to another instance; nil: requests are
	// served here (a session held elsewhere then answers
	// session_elsewhere).
	Forward Forwarder
	// Heartbeat is how often an idle terminal stream says it lives; the
	// page counts a stream silent for two of them as dead.
	Heartbeat time.Duration
}

// Forwarder hands requests to other instances.
type Forwarder interface {
	// Forwarded says the request came from another instance, which
	// handed it here: it is served here, never handed on again.
	Forwarded(r *http.Request) bool
	// Forward streams the request to the instance at address and its
	// answer back.
	Forward(c *gin.Context, address string)
}

// ToHolder hands a request about the session's runtime (its commands and
// shells) to the instance that holds it, when that is another one. The
// caller's right to the session is checked first, here, before anything
// of the body is read; the holder checks it again as for any request. A
// shell this instance runs is served here without a look at the database.
func (h *EditSessions) ToHolder(c *gin.Context) error {
	if h.Forward == nil || h.Forward.Forwarded(c.Request) {
		return nil
	}
	if _, ok := h.ownShell(c, time.Time{}); ok {
		return nil
	}
	sess, err := h.session(c, false)
	if err != nil {
		return h.watchOnly(c, err)
	}
	address, err := h.Runtime.HolderElsewhere(c.Request.Context(), sess)
	if err != nil || address == "" {
		return err
	}
	h.Forward.Forward(c, address)
	c.Abort()
	return nil
}

// timeFormat is how deadlines travel to the page, to the millisecond, so
// its countdown follows the server's clock.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

type sessionView struct {
	Session *editsession.Session
	Tree    sessionTreeView
	Idle    time.Duration
	Now     time.Time
	Open    string
	Hint    string // the command box's example
	Usage   meter.Usage
	// Running is the session's command running on this instance, which
	// the page follows, or nil.
	Running *workbench.RunningCommand
	// SearchForm is the search panel's box.
	SearchForm searchFormView
	// Heartbeat is EditSessions.Heartbeat, in milliseconds for the page.
	Heartbeat int64
}

func (v sessionView) JSON() any {
	return gin.H{"id": v.Session.ID, "baseCommit": v.Session.BaseCommit,
		"idleDeadline": v.Session.IdleDeadline.Format(timeFormat), "maxDeadline": v.Session.MaxDeadline.Format(timeFormat)}
}

// Open opens the caller's session on the project, or returns the open one:
// 201 or 200, with Location. A path (the Code page's "Edit this file")
// sends a browser on to the session's page with that file open. The
// session's sandbox is prepared meanwhile, for the first command.
func (h *EditSessions) Open(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeEdit)
	if err != nil {
		return err
	}
	file := c.PostForm("path")
	if file != "" {
		if err := workspace.CheckRelPath(file); err != nil {
			return err
		}
	}
	sess, created, err := h.Sessions.Open(c.Request.Context(), acc)
	if err != nil {
		return err
	}
	h.Runtime.Warm(sess)
	location := base(sess)
	if file != "" {
		location = views.URL(location).Query("path", file).String()
	}
	return answerMade(c, location, created, sessionView{Session: sess}.JSON())
}

// Page renders the session page.
func (h *EditSessions) Page(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	tree, err := h.treeView(c, sess, "", foldersAbove(c.Query("path")))
	if err != nil {
		return err
	}
	_, usage, err := h.Runtime.History(c.Request.Context(), sess)
	if err != nil {
		return err
	}
	v := sessionView{
		Session: sess, Tree: tree,
		Idle: h.Idle, Now: h.Now(), Open: c.Query("path"), Hint: h.CommandHint, Usage: usage, Heartbeat: h.Heartbeat.Milliseconds(),
		SearchForm: searchFormView{Action: views.URL(base(sess), "search").String(), Target: "#search-results"},
	}
	if rc, ok := h.Runtime.SessionCommand(sess); ok {
		v.Running = &rc
	}
	return h.Render.Render(c, http.StatusOK, "session", v)
}

type sessionTreeView struct {
	Base    string
	Dir     string
	Entries []editsession.Entry
	Root    bool // the whole tree, with the explorer's toolbar
	// Children are the unfolded folders, by path, shared by every level.
	Children map[string]*sessionTreeView
}

// Child is the unfolded folder at path, or nil.
func (v sessionTreeView) Child(path string) *sessionTreeView { return v.Children[path] }

func (v sessionTreeView) JSON() any { return v.Entries }

// Tree renders one level of the session's tree with its change marks.
func (h *EditSessions) Tree(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	v, err := h.treeView(c, sess, c.Query("path"), c.QueryArray("open"))
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/session_tree", v)
}

// File answers the file's exact bytes with its ETag.
func (h *EditSessions) File(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	f, err := h.Sessions.Read(c.Request.Context(), sess, c.Query("path"))
	if err != nil {
		return err
	}
	c.Header("ETag", f.ETag)
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "text/plain; charset=utf-8", f.Content)
	return nil
}

// Save stores the request body as the file, exactly as sent.
// The session is checked inside the save's transaction, not before it: a
// save reads the session's row once.
func (h *EditSessions) Save(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	content, err := io.ReadAll(io.LimitReader(c.Request.Body, editsession.MaxFileBytes+1))
	if err != nil {
		// As for any request to a session, its checks answer first.
		if _, serr := h.session(c, true); serr != nil {
			return serr
		}
		if isTooLarge(err) {
			return editsession.ErrTooLarge
		}
		return err
	}
	sess, etag, err := h.Sessions.Save(c.Request.Context(), acc, c.Param("sid"), c.Query("path"), content, precondition(c))
	if sess != nil {
		h.deadlines(c, sess.IdleDeadline)
	}
	if err != nil {
		return err
	}
	c.Header("ETag", etag)
	c.Status(http.StatusNoContent)
	return nil
}

// Delete removes the file from the session's tree.
func (h *EditSessions) Delete(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	if err := h.Sessions.Delete(c.Request.Context(), sess, c.Query("path"), precondition(c)); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

type changesView struct {
	Base    string
	Changes []editsession.Change
}

func (v changesView) JSON() any { return v.Changes }

// Changes lists the changed paths: JSON, or the panel for htmx.
func (h *EditSessions) Changes(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	changes, err := h.Sessions.Changes(c.Request.Context(), sess)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/changes", changesView{Base: base(sess), Changes: changes})
}

type diffView struct {
	Path string `json:"path"`
	Diff string `json:"diff"`
}

// Diff shows one file's unified diff against the base.
func (h *EditSessions) Diff(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	p := c.Query("path")
	d, err := h.Sessions.Diff(c.Request.Context(), sess, p)
	if err != nil {
		return err
	}
	if !views.WantsJSON(c.Request) && !views.IsHTMX(c.Request) {
		c.Data(http.StatusOK, "text/plain; charset=utf-8", []byte(d))
		return nil
	}
	return h.Render.Render(c, http.StatusOK, "partials/diff", diffView{Path: p, Diff: d})
}

// Discard ends the session and drops its edits.
func (h *EditSessions) Discard(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	if err := h.Sessions.Discard(c.Request.Context(), sess); err != nil {
		return err
	}
	if views.WantsJSON(c.Request) {
		c.Status(http.StatusNoContent)
		return nil
	}
	views.Redirect(c, views.URL("/projects", sess.ProjectID, "code").String())
	return nil
}

// Keepalive counts as activity and says when the session idles out.
func (h *EditSessions) Keepalive(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"idleDeadline": sess.IdleDeadline.Format(timeFormat), "serverNow": h.Now().Format(timeFormat)})
	return nil
}

// session checks, on every request, that the caller may edit the project
// and that the session is theirs and open, ending it here when it is over a
// limit. touch says whether the request counts as activity. Every answer
// carries the idle deadline and the server's clock.
//
// Only the session's owner learns it exists: anyone else, a project admin
// too, gets 404 before any permission is weighed; an owner who has lost the
// right to edit gets 403.
func (h *EditSessions) session(c *gin.Context, touch bool) (*editsession.Session, error) {
	id, err := projectID(c)
	if err != nil {
		return nil, err
	}
	ctx, sid := c.Request.Context(), c.Param("sid")
	acc, cs, err := h.Projects.AuthorizeSession(ctx, auth.User(c), id, sid, auth.CodeRead)
	if err != nil {
		return nil, err
	}
	sess, err := h.Sessions.GetRead(ctx, acc, sid, cs, touch)
	if err != nil {
		return nil, err
	}
	if !acc.Can(auth.CodeEdit) {
		return nil, auth.ErrForbidden
	}
	if !acc.Project.Archived() { // a paused session has no idle limit
		h.deadlines(c, sess.IdleDeadline)
	}
	return sess, nil
}

// deadlines tells the page when the session goes idle, on the server's
// clock.
func (h *EditSessions) deadlines(c *gin.Context, idle time.Time) {
	c.Header("X-Session-Idle-Deadline", idle.Format(timeFormat))
	c.Header("X-Server-Now", h.Now().Format(timeFormat))
}

func precondition(c *gin.Context) editsession.Precondition {
	return editsession.Precondition{IfMatch: c.GetHeader("If-Match"), IfNoneMatch: c.GetHeader("If-None-Match")}
}

// base is the URL prefix of the session.
func base(sess *editsession.Session) string {
	return views.URL("/projects", sess.ProjectID, "sessions", sess.ID).String()
}

type commandView struct {
	Result *workbench.CommandResult
	Folder string
	Cmd    string
}

func (v commandView) JSON() any { return v.Result }

// RunCommand runs a one-shot command in the session's sandbox. The page
// then refreshes the tree, the changes and the history, since the command
// may have changed files.
func (h *EditSessions) RunCommand(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	cmd, folder := c.PostForm("command"), c.PostForm("folder")
	res, err := h.Runtime.RunCommand(c.Request.Context(), sess, cmd, folder)
	if err != nil {
		return err
	}
	c.Header("HX-Trigger", "refresh")
	return h.Render.Render(c, http.StatusOK, "partials/command_result", commandView{Result: res, Folder: folder, Cmd: cmd})
}

// CommandStream sends the output of the session's running command as
// Server-Sent Events, as a terminal's stream does (terminal.Output), from
// Last-Event-ID or ?from=; its exit event carries the exit code, whether
// it was cancelled, its duration and the notes. 409 no_running_command
// when none runs here.
func (h *EditSessions) CommandStream(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	out, err := h.Runtime.CommandOutput(sess)
	if err != nil {
		return err
	}
	return out.ServeStream(c.Writer, c.Request)
}

// CancelCommands stops the session's running command: 200 with how many
// were stopped, 409 no_running_command when none runs. The command's own
// request then answers its result, marked canceled.
func (h *EditSessions) CancelCommands(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	n, err := h.Runtime.CancelCommands(sess)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"canceled": n})
	return nil
}

// Find is quick open over the session's tree: the base's files with the
// session's added ones, without its deleted ones.
func (h *EditSessions) Find(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	q := c.Query("q")
	if err := code.CheckFindQuery(q); err != nil {
		return err
	}
	matches, err := h.Sessions.Find(c.Request.Context(), sess, q, code.MaxFindResults)
	if err != nil {
		return err
	}
	v := findView{ProjectID: sess.ProjectID, Base: base(sess), Found: code.Found{Query: q, Matches: matches}, Rows: make([]findRow, len(matches))}
	for i, m := range matches {
		v.Rows[i] = findRow{Path: m.Path, Runs: runsOf(m.Path, m.Positions)}
	}
	return h.Render.Render(c, http.StatusOK, "partials/find", v)
}

// Search answers a search of the session's files as the session sees
// them (?q=, ?regex=1, ?case=1): streamed as events to the workbench's
// search panel, or whole (JSON for scripts). Only the session's owner may.
func (h *EditSessions) Search(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	page := views.URL(base(sess))
	l := linker{file: func(p string) string { return page.Query("path", p).String() }, session: true}
	run := func(ctx context.Context, m *search.Matcher, emit func(search.File) error) (search.Summary, error) {
		return h.Sessions.Search(ctx, sess, m, emit)
	}
	return answerSearch(c, h.Render, run, l, nil)
}

type historyView struct {
	Commands []models.SessionCommand
	Usage    meter.Usage
}

func (v historyView) JSON() any { return gin.H{"commands": v.Commands, "usage": v.Usage} }

// History lists the session's recent commands and the project's sandbox
// time this month.
func (h *EditSessions) History(c *gin.Context) error {
	sess, err := h.session(c, false)
	if err != nil {
		return err
	}
	cmds, usage, err := h.Runtime.History(c.Request.Context(), sess)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/command_history", historyView{Commands: cmds, Usage: usage})
}

// maxOpenFolders bounds the folders one tree request unfolds.
const maxOpenFolders = 64

// treeView renders dir with the folders in open unfolded below it (those
// the person had open, or those above the file the page opens), so a
// refresh after an edit keeps the tree as it was, in one render.
func (h *EditSessions) treeView(c *gin.Context, sess *editsession.Session, dir string, open []string) (sessionTreeView, error) {
	ctx := c.Request.Context()
	v := sessionTreeView{Base: base(sess), Dir: dir, Root: dir == "", Children: map[string]*sessionTreeView{}}
	entries, err := h.Sessions.List(ctx, sess, dir)
	if err != nil {
		return v, err
	}
	v.Entries = entries
	if len(open) > maxOpenFolders {
		open = open[:maxOpenFolders]
	}
	wanted := map[string]bool{}
	for _, p := range open {
		wanted[p] = true
	}
	var unfold func(parent *sessionTreeView) error
	unfold = func(parent *sessionTreeView) error {
		for _, e := range parent.Entries {
			p := childPath(parent.Dir, e.Name)
			if e.Kind != "dir" || !wanted[p] {
				continue
			}
			delete(wanted, p) // once, whatever the request says
			es, err := h.Sessions.List(ctx, sess, p)
			if errors.Is(err, editsession.ErrFileNotFound) {
				continue // gone since the page asked: shown folded
			}
			if err != nil {
				return err
			}
			child := &sessionTreeView{Base: parent.Base, Dir: p, Entries: es, Children: v.Children}
			v.Children[p] = child
			if err := unfold(child); err != nil {
				return err
			}
		}
		return nil
	}
	return v, unfold(&v)
}

func childPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// foldersAbove lists the folders that hold path, outermost first.
func foldersAbove(path string) []string {
	var dirs []string
	for i := 0; i < len(path); i++ {
		if path[i] == '/' {
			dirs = append(dirs, path[:i])
		}
	}
	return dirs
}

// NewFile adds an empty file to the session's tree: 201, or 409 exists.
func (h *EditSessions) NewFile(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	path := c.PostForm("path")
	etag, err := h.Sessions.Create(c.Request.Context(), sess, path)
	if err != nil {
		return err
	}
	c.Header("ETag", etag)
	c.JSON(http.StatusCreated, gin.H{"path": path})
	return nil
}

// NewFolder checks a new folder's name and stores nothing: git keeps no
// empty folders, so the page shows it as pending until a file is added.
func (h *EditSessions) NewFolder(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	path := c.PostForm("path")
	if err := h.Sessions.CheckNewFolder(c.Request.Context(), sess, path); err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"path": path, "pending": true})
	return nil
}

// Rename moves a file or folder, in one transaction.
func (h *EditSessions) Rename(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	moves, err := h.Sessions.Rename(c.Request.Context(), sess, c.PostForm("from"), c.PostForm("to"))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"moved": moves})
	return nil
}

// DeleteFolder deletes every file of a folder.
func (h *EditSessions) DeleteFolder(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	deleted, err := h.Sessions.DeleteFolder(c.Request.Context(), sess, c.PostForm("path"))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"deleted": deleted})
	return nil
}

// Revert forgets the session's change of one path (restores a deletion).
func (h *EditSessions) Revert(c *gin.Context) error {
	sess, err := h.session(c, true)
	if err != nil {
		return err
	}
	if err := h.Sessions.Revert(c.Request.Context(), sess, c.PostForm("path")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}
