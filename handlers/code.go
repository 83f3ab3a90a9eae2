package handlers

import (
	"context"
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
	"atelier/search"
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
	// UploadDir is where uploaded archives wait for their import, in
	// files that have no name.
	UploadDir string
	Meter     *meter.Meter // the warning at 80 % and 95 % of the sandbox cap
	Log       *slog.Logger // failures told inside a started progress stream
}

type codePageView struct {
	Project *models.Project
	Head    code.Head
	Root    treeView
	File    *fileView
	// Readme is the README of the folder shown (the top one, or the one
	// ?path= names), in the viewer where GitHub shows it below a listing;
	// nil when a file is shown or the folder has none.
	Readme  *fileView
	CanEdit bool
	// NoEdit says why there is no Edit button, to someone who may read.
	NoEdit string
	Usage  meter.Usage
	// Search is a search's answer, shown in the viewer's place.
	Search     *searchView
	SearchForm searchFormView
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
	HTML      template.HTML // the highlighted text, when it is shown
	// Markdown is a Markdown file rendered (sanitized), when it is shown;
	// Source says its text is shown instead (?view=source).
	Markdown   template.HTML
	IsMarkdown bool
	Source     bool
	// CanEdit offers "Edit this file" (the person's edit session, opened
	// at the file) to owners and admins.
	CanEdit bool
}

func (v fileView) JSON() any { return v.File }

// Page renders the Code page, with a file open when ?path= names one.
func (h *Code) Page(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	v, err := h.pageView(c, acc)
	if err != nil {
		return err
	}
	dir := ""
	if p := c.Query("path"); p != "" {
		if v.Root.Open, err = h.openFolders(c, acc, p); err != nil {
			return err
		}
		if isFolder(v.Root, p) {
			// A folder (a README's link to one): the tree opens it, the
			// viewer shows its README.
			entries, err := h.Code.List(c.Request.Context(), acc.Project, p)
			if err != nil {
				return err
			}
			v.Root.Open[p] = treeView{ProjectID: acc.Project.ID, Dir: p, Entries: entries, Open: v.Root.Open}
			dir = p
		} else if v.File, err = h.file(c, acc, p); err != nil {
			return err
		}
	}
	if v.File == nil {
		if v.Readme, err = h.readme(c, acc, v.Root, dir); err != nil {
			return err
		}
	}
	return h.Render.Render(c, http.StatusOK, "code", v)
}

// pageView is the Code page around what its viewer shows.
func (h *Code) pageView(c *gin.Context, acc *projects.Access) (codePageView, error) {
	ctx := c.Request.Context()
	head, err := h.Code.Head(ctx, acc.Project)
	if err != nil {
		return codePageView{}, err
	}
	entries, err := h.Code.List(ctx, acc.Project, "")
	if err != nil {
		return codePageView{}, err
	}
	v := codePageView{
		Project:    acc.Project,
		Head:       head,
		Root:       treeView{ProjectID: acc.Project.ID, Entries: entries},
		CanEdit:    acc.Can(auth.CodeEdit) && !acc.Project.Archived(),
		NoEdit:     noEditReason(acc),
		SearchForm: searchFormView{Action: views.URL("/projects", acc.Project.ID, "code", "search").String(), Target: "#viewer"},
	}
	v.Usage, err = h.Meter.Usage(ctx, acc.Project.ID)
	return v, err
}

// Search answers a search of the project's file contents (?q=, ?regex=1,
// ?case=1): streamed as events to the page's search box, as JSON for
// scripts, or as the Code page with the results in the viewer.
func (h *Code) Search(c *gin.Context) error {
	acc, err := h.open(c)
	if err != nil {
		return err
	}
	code := views.URL("/projects", acc.Project.ID, "code")
	l := linker{file: func(p string) string { return code.Query("path", p).String() }}
	run := func(ctx context.Context, m *search.Matcher, emit func(search.File) error) (search.Summary, error) {
		return h.Code.Search(ctx, acc.Project, m, emit)
	}
	return answerSearch(c, h.Render, run, l, func(sv searchView) error {
		v, err := h.pageView(c, acc)
		if err != nil {
			return err
		}
		v.Search, v.SearchForm.Query = &sv, sv.Query
		return h.Render.Render(c, http.StatusOK, "code", v)
	})
}

// isFolder tells whether p is a folder of the tree as listed down to it.
func isFolder(root treeView, p string) bool {
	parent := root
	if d := path.Dir(p); d != "." {
		listed, ok := root.Open[d]
		if !ok {
			return false
		}
		parent = listed
	}
	for _, e := range parent.Entries {
		if e.Name == path.Base(p) {
			return e.Kind == "dir"
		}
	}
	return false
}

// readme shows the README of the folder dir, listed in root: a Markdown
// one first, then a plain one; nil when there is none to show.
func (h *Code) readme(c *gin.Context, acc *projects.Access, root treeView, dir string) (*fileView, error) {
	entries := root.Entries
	if dir != "" {
		entries = root.Open[dir].Entries
	}
	best := ""
	for _, e := range entries {
		stem := strings.ToLower(strings.TrimSuffix(e.Name, path.Ext(e.Name)))
		if e.Kind != "file" || stem != "readme" {
			continue
		}
		if best == "" || views.IsMarkdown(e.Name) && !views.IsMarkdown(best) {
			best = e.Name
		}
	}
	if best == "" {
		return nil, nil
	}
	f, err := h.file(c, acc, path.Join(dir, best))
	if err != nil && ProblemOf(err).Status >= 500 {
		return nil, err
	}
	// A README that cannot be read here (a name the path rules refuse, a
	// Local file that changed meanwhile) costs the folder its README, not
	// its page.
	if err != nil || f.File.Binary || f.File.TooLarge || f.File.Size == 0 {
		return nil, nil
	}
	return f, nil
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
		CanEdit: acc.Can(auth.CodeEdit) && !acc.Project.Archived() && !f.Binary && !f.TooLarge && !f.ReadOnly}
	if acc.Project.WorkspaceMode != models.ModeLocal && acc.Project.CanonicalCommit != nil {
		v.Commit = *acc.Project.CanonicalCommit
	}
	v.IsMarkdown = views.IsMarkdown(v.Name) && f.Text != ""
	v.Source = v.IsMarkdown && c.Query("view") == "source"
	switch {
	case v.IsMarkdown && !v.Source:
		dir := path.Dir(p)
		if dir == "." {
			dir = ""
		}
		if v.Markdown, err = views.Markdown(f.Text, views.MarkdownPlace{ProjectID: acc.Project.ID, Dir: dir}); err != nil {
			return nil, err
		}
	case f.Text != "":
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
// source. Nothing of the body is read before the request is known to be
// allowed: the routes checked the sign-in and the CSRF token (an upload's
// from its header), access checks membership and permission, and Admit
// takes the import's place; only then is the upload read.
func (h *Code) Import(c *gin.Context) error {
	acc, err := access(c, h.Projects, auth.ProjectManage)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	adm, err := h.Code.Admit(ctx, acc)
	if err != nil {
		return err
	}
	defer adm.Release()
	in, err := h.readImport(c)
	if err != nil {
		return err
	}
	defer in.close()
	if streamsProgress(c.Request) {
		return h.importWatched(c, acc, adm, in.ImportInput)
	}
	done, err := h.Code.Import(ctx, adm, in.ImportInput)
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
func (h *Code) importWatched(c *gin.Context, acc *projects.Access, adm *code.Admission, in code.ImportInput) error {
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
	done, err := h.Code.Import(c.Request.Context(), adm, in)
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
