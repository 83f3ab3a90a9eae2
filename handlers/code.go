package handlers

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/code"
	"atelier/fault"
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
}

type codePageView struct {
	Project *models.Project
	Head    code.Head
	Root    treeView
	File    *fileView
	CanEdit bool
}

func (v codePageView) JSON() any { return gin.H{"head": v.Head, "entries": v.Root.Entries} }

type treeView struct {
	ProjectID int64
	Dir       string
	Entries   []code.Entry
}

func (v treeView) JSON() any { return v.Entries }

type fileView struct {
	ProjectID int64
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
		CanEdit: acc.Can(auth.CodeEdit),
	}
	if p := c.Query("path"); p != "" {
		if v.File, err = h.file(c, acc, p); err != nil {
			return err
		}
	}
	return h.Render.Render(c, http.StatusOK, "code", v)
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
	if f.Text != "" {
		if v.HTML, err = views.Highlight(v.Name, f.Text); err != nil {
			return nil, err
		}
	}
	return v, nil
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
	commit, err := h.Code.Import(c.Request.Context(), acc, in)
	if err != nil {
		return err
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusOK, gin.H{"commit": commit})
		return nil
	}
	views.Redirect(c, views.URL("/projects", acc.Project.ID, "code").String())
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
