package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/code"
	"atelier/fault"
	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/views"
)

// Code is the Code page: the tree, the viewer, downloads, import and the
// git remotes panel.
type Code struct {
	Render   *views.Renderer
	Projects *projects.Service
	Code     *code.Service
	// MaxImportBytes bounds an uploaded archive.
	MaxImportBytes int64
	Meter          *meter.Meter // the warning at 80 % and 95 % of the sandbox cap
	Log            *slog.Logger // failures told inside a started progress stream
}

type codePageView struct {
	Project *models.Project
	Head    code.Head
	Root    treeView
	File    *fileView
	CanEdit bool
	// NoEdit says why there is no Edit button, to someone who may read.
	NoEdit string
	Usage  meter.Usage
}

func (v codePageView) JSON() any { return gin.H{"head": v.Head, "entries": v.Root.Entries} }

type treeView struct {
	ProjectID int64
	Dir       string
	Entries   []code.Entry
	// Open holds the folders already listed below this one, by path: the
	// way down to the open file, so a reload shows where it is.
	Open map[string]treeView
}

func (v treeView) JSON() any { return v.Entries }

// Child is the listed folder dir below this one, or nil when it is folded.
func (v treeView) Child(dir string) *treeView {
	if c, ok := v.Open[dir]; ok {
		return &c
	}
	return nil
}

type fileView struct {
	ProjectID int64
	Commit    string // a Container project's canonical commit; the page header says a Local one's
	File      code.File
	Name      string
	HTML      template.HTML
	// CanEdit offers "Edit this file" (a one-file Change) to owners and
	// admins.
	CanEdit bool
}

func (v fileView) JSON() any { return v.File }

// Page renders the Code page, with a file open when ?path= names one.
func (h *Code) Page(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	head, err := h.Code.Head(ctx, acc.Project)
	if err != nil {
		return err
	}
	entries, err := h.Code.List(ctx, acc.Project, "")
	if err != nil {
		return err
	}
	v := codePageView{
		Project: acc.Project,
		Head:    head,
		Root:    treeView{ProjectID: acc.Project.ID, Entries: entries},
		CanEdit: acc.Can(auth.CodeEdit) && !acc.Project.Archived(),
		NoEdit:  noEditReason(acc),
	}
	if v.Usage, err = h.Meter.Usage(ctx, acc.Project.ID); err != nil {
		return err
	}
	if p := c.Query("path"); p != "" {
		if v.File, err = h.file(c, acc, p); err != nil {
			return err
		}
		if v.Root.Open, err = h.openFolders(c, acc, p); err != nil {
			return err
		}
	}
	return h.Render.Render(c, http.StatusOK, "code", v)
}

// openFolders lists every folder above file, so the page opens with the
// tree unfolded down to it.
func (h *Code) openFolders(c *gin.Context, acc *projects.Access, file string) (map[string]treeView, error) {
	open := map[string]treeView{}
	for dir := path.Dir(file); dir != "." && dir != "/"; dir = path.Dir(dir) {
		entries, err := h.Code.List(c.Request.Context(), acc.Project, dir)
		if err != nil {
			return nil, err
		}
		open[dir] = treeView{ProjectID: acc.Project.ID, Dir: dir, Entries: entries, Open: open}
	}
	return open, nil
}

// noEditReason says why someone who reads the code sees no Edit button, or
// "" when they have one.
func noEditReason(acc *projects.Access) string {
	switch {
	case acc.Project.Archived():
		return "The project is archived, so its code can be read but not edited."
	case !acc.Can(auth.CodeEdit):
		return fmt.Sprintf("You are a %s of this project: members read the code; owners and admins edit it.", acc.Role)
	}
	return ""
}

// Tree renders one level of a folder.
func (h *Code) Tree(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	dir := c.Query("path")
	entries, err := h.Code.List(c.Request.Context(), acc.Project, dir)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/tree", treeView{ProjectID: acc.Project.ID, Dir: dir, Entries: entries})
}

// File renders the viewer for one file.
func (h *Code) File(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	v, err := h.file(c, acc, c.Query("path"))
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/file", v)
}

func (h *Code) file(c *gin.Context, acc *projects.Access, p string) (*fileView, error) {
	f, err := h.Code.Read(c.Request.Context(), acc.Project, p)
	if err != nil {
		return nil, err
	}
	v := &fileView{ProjectID: acc.Project.ID, File: f, Name: path.Base(p),
		CanEdit: acc.Can(auth.CodeEdit) && !acc.Project.Archived() && !f.Binary && !f.TooLarge}
	if acc.Project.WorkspaceMode != models.ModeLocal && acc.Project.CanonicalCommit != nil {
		v.Commit = *acc.Project.CanonicalCommit
	}
	if f.Text != "" {
		if v.HTML, err = views.Highlight(v.Name, f.Text); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// findView is quick open's answer: the matches as links into the Code page,
// each path split into runs so the matched characters can be marked.
type findView struct {
	ProjectID int64
	Base      string // an edit session's URL: results open there, not on the Code page
	Found     code.Found
	Rows      []findRow
}

type findRow struct {
	Path string
	Runs []findRun
}

type findRun struct {
	Text string
	Hit  bool
}

func (v findView) JSON() any { return v.Found }

// Find answers quick open: the project's file paths that fuzzily match ?q=,
// best first, as JSON or as the finder's list.
func (h *Code) Find(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	limit, _ := strconv.Atoi(c.Query("limit")) // out of range or absent takes the default
	found, err := h.Code.Find(c.Request.Context(), acc.Project, c.Query("q"), limit)
	if err != nil {
		return err
	}
	v := findView{ProjectID: acc.Project.ID, Found: found, Rows: make([]findRow, len(found.Matches))}
	for i, m := range found.Matches {
		v.Rows[i] = findRow{Path: m.Path, Runs: runsOf(m.Path, m.Positions)}
	}
	return h.Render.Render(c, http.StatusOK, "partials/find", v)
}

// runsOf splits path into alternating runs of unmatched and matched bytes.
func runsOf(path string, positions []int) []findRun {
	var runs []findRun
	hit := make(map[int]bool, len(positions))
	for _, p := range positions {
		hit[p] = true
	}
	start := 0
	for i := 1; i <= len(path); i++ {
		if i == len(path) || hit[i] != hit[start] {
			runs = append(runs, findRun{Text: path[start:i], Hit: hit[start]})
			start = i
		}
	}
	return runs
}

// Raw serves a file's bytes. They are never interpreted in our origin: no
// sniffing, and a sandbox CSP, so an uploaded HTML page cannot run here.
// The file streams from where it lives; a seekable one (a Local file, the
// local object store's) answers Range requests too.
func (h *Code) Raw(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	p := c.Query("path")
	rc, size, err := h.Code.Raw(c.Request.Context(), acc.Project, p)
	if err != nil {
		return err
	}
	defer rc.Close()
	w := c.Writer.Header()
	w.Set("X-Content-Type-Options", "nosniff")
	w.Set("Content-Security-Policy", "sandbox")
	w.Set("Content-Type", "application/octet-stream") // set, so ServeContent does not sniff
	disposition := "inline"
	if c.Query("download") != "" {
		disposition = "attachment"
	}
	w.Set("Content-Disposition", fmt.Sprintf("%s; filename=%q", disposition, path.Base(p)))
	if rs, ok := rc.(io.ReadSeeker); ok {
		http.ServeContent(c.Writer, c.Request, "", time.Time{}, rs)
		return nil
	}
	w.Set("Content-Length", strconv.FormatInt(size, 10))
	c.Status(http.StatusOK)
	_, err = io.Copy(c.Writer, rc)
	return err // the status is sent; a failure here only cuts the body
}

// HighlightCSS serves the viewer's colours.
func (h *Code) HighlightCSS(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=86400")
	c.Data(http.StatusOK, "text/css; charset=utf-8", views.HighlightCSS())
}

// Import makes a commit on canonical from an uploaded archive or a git
// source.
func (h *Code) Import(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	in := code.ImportInput{Source: c.PostForm("source")}
	fh, err := c.FormFile("archive")
	switch {
	case err == nil:
		if fh.Size > h.MaxImportBytes {
			return tooLarge(h.MaxImportBytes)
		}
		f, err := fh.Open()
		if err != nil {
			return err
		}
		defer f.Close()
		in.Archive, in.Size, in.Filename = f, fh.Size, fh.Filename
	case errors.Is(err, http.ErrMissingFile), errors.Is(err, http.ErrNotMultipart):
	case isTooLarge(err):
		return tooLarge(h.MaxImportBytes)
	default:
		return errBadUpload
	}
	if streamsProgress(c.Request) {
		return h.importWatched(c, acc, in)
	}
	done, err := h.Code.Import(c.Request.Context(), acc, in)
	if err != nil {
		return err
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusOK, done)
		return nil
	}
	views.Redirect(c, views.URL("/projects", acc.Project.ID, "code").String())
	return nil
}

// progressType is what the import form asks for to watch an import: one
// JSON object a line, {"progress": step} while it runs, then {"done":
// summary} or {"error", "reason", "hint"}.
const progressType = "application/x-ndjson"

func streamsProgress(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), progressType)
}

// progressEvery spaces the lines of a running phase; a new phase is told
// at once.
const progressEvery = 100 * time.Millisecond

// importWatched runs an import answering a stream of its progress on the
// request itself: no state is kept anywhere, and a refusal that comes
// before any progress (not allowed, busy, too large) keeps its own status.
func (h *Code) importWatched(c *gin.Context, acc *projects.Access, in code.ImportInput) error {
	w := c.Writer
	started := false
	var last code.ImportStep
	var lastAt time.Time
	send := func(v any) {
		if !started {
			started = true
			w.Header().Set("Content-Type", progressType)
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		json.NewEncoder(w).Encode(v) // a reader gone only ends the stream early
		w.Flush()
	}
	in.Progress = func(st code.ImportStep) {
		if st.Phase == last.Phase && time.Since(lastAt) < progressEvery {
			return
		}
		last, lastAt = st, time.Now()
		send(gin.H{"progress": st})
	}
	done, err := h.Code.Import(c.Request.Context(), acc, in)
	switch {
	case err != nil && !started:
		return err
	case err != nil:
		if h.Log != nil && ProblemOf(err).Status >= 500 {
			h.Log.Error("import failed", "project", acc.Project.ID, "err", err)
		}
		p := ProblemOf(err)
		send(gin.H{"error": p.Message, "reason": p.Reason, "hint": p.Hint, "status": p.Status})
	default:
		send(gin.H{"done": done})
	}
	return nil
}

// Remotes answers the git remotes panel.
func (h *Code) Remotes(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return err
	}
	rs, err := h.Code.Remotes(c.Request.Context(), acc.Project)
	if err != nil {
		return err
	}
	return h.Render.Render(c, http.StatusOK, "partials/remotes", rs)
}

// open authorizes reading code and applies the Code tab's gate.
func (h *Code) open(c *gin.Context) (*projects.Access, error) {
	acc, err := access(c, h.Projects, auth.CodeRead)
	if err != nil {
		return nil, err
	}
	if err := h.Projects.CodeReady(acc.Project); err != nil {
		return nil, err
	}
	return acc, nil
}

// errBadUpload is a multipart body that could not be read.
var errBadUpload = fault.New(fault.BadInput, "bad_upload", "handlers: unreadable upload", "The upload could not be read.")

// tooLarge is an upload over the import limit, which the handler knows.
func tooLarge(limit int64) error {
	return fault.New(fault.TooLarge, "too_large", fmt.Sprintf("handlers: upload over %d bytes", limit),
		fmt.Sprintf("The archive is larger than %d MiB.", limit>>20))
}

func isTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe) || errors.Is(err, multipart.ErrMessageTooLarge)
}
