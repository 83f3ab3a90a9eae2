package handlers

import (
	"errors"
	"io"
	"net/http"
	"os"

	"github.com/gin-gonic/gin"
	"golang.org/x/sys/unix"

	"atelier/auth"
	"atelier/code"
	"atelier/fault"
)

// An import's form is read part by part as it arrives, never through
// ParseMultipartForm or FormFile, which keep every file part larger than
// their memory bound in a temporary file of their own choosing, for the
// whole request, whoever sent it.
const (
	// maxImportParts bounds the parts of an import's form: the page sends
	// two (the token and the archive or the source).
	maxImportParts = 16
	// maxSourceBytes bounds the source field: a URL or a folder.
	maxSourceBytes = 64 << 10
)

// upload is what an import's request carries, and the file its archive
// waits in.
type upload struct {
	code.ImportInput
	spool *os.File
}

func (u *upload) close() {
	if u.spool != nil {
		u.spool.Close()
	}
}

// readImport reads what to import from the request: the source of a
// urlencoded form (its body is bounded like every form's), or a multipart
// form streamed part by part: the archive into a file of the import's own
// (spool), the source field, and nothing else kept.
func (h *Code) readImport(c *gin.Context) (*upload, error) {
	if auth.IsPlainForm(c.Request) {
		return &upload{ImportInput: code.ImportInput{Source: c.PostForm("source")}}, nil
	}
	mr, err := c.Request.MultipartReader()
	if errors.Is(err, http.ErrNotMultipart) {
		return &upload{}, nil // nothing to import, which the import says
	}
	if err != nil {
		return nil, errBadUpload
	}
	u := &upload{}
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return u, nil
		}
		if err == nil && parts == maxImportParts {
			err = fault.Detailf(errBadUpload, ": it has more than %d parts", maxImportParts)
		}
		if err == nil {
			err = h.readImportPart(u, p.FormName(), p.FileName(), p)
		}
		if err != nil {
			u.close()
			return nil, h.uploadError(err)
		}
	}
}

func (h *Code) readImportPart(u *upload, name, filename string, p io.Reader) error {
	switch {
	case name == "archive" && filename != "":
		if u.spool != nil {
			return fault.Detailf(errBadUpload, ": it holds more than one archive")
		}
		f, n, err := h.spoolArchive(p)
		if err != nil {
			return err
		}
		u.spool, u.Archive, u.Size, u.Filename = f, f, n, filename
	case name == "source":
		v, err := io.ReadAll(io.LimitReader(p, maxSourceBytes+1))
		if err != nil {
			return err
		}
		if len(v) > maxSourceBytes {
			return fault.Detailf(errBadUpload, ": its source is longer than %d bytes", maxSourceBytes)
		}
		u.Source = string(v)
	default:
		// The form's token field, or anything else: read past, not kept.
		if _, err := io.Copy(io.Discard, p); err != nil {
			return err
		}
	}
	return nil
}

// spoolArchive copies an uploaded archive into a file of its own, which it
// reads twice (zip wants random access, and every archive is checked
// whole before it is written). The file is never larger than
// MaxImportBytes, and there is one per admitted import, so the imports
// running at once bound these files together.
func (h *Code) spoolArchive(r io.Reader) (*os.File, int64, error) {
	f, err := openSpool(h.UploadDir)
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, h.MaxImportBytes+1))
	if err == nil && n > h.MaxImportBytes {
		err = tooLarge(h.MaxImportBytes)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, n, nil
}

// openSpool opens a file in dir that has no name, so nothing of it
// outlives the process, however that ends: O_TMPFILE, or where the file
// system lacks it, a file removed as soon as it is made.
func openSpool(dir string) (*os.File, error) {
	if f, err := os.OpenFile(dir, os.O_RDWR|unix.O_TMPFILE, 0o600); err == nil {
		return f, nil
	}
	f, err := os.CreateTemp(dir, "upload-")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// uploadError is how a failed read of an import's form is told: a body
// past its bound is too large, a failure of the spool's own disk is the
// server's, and anything else (a body cut short or malformed) a bad upload.
func (h *Code) uploadError(err error) error {
	var fe fault.Error
	var pe *os.PathError
	switch {
	case isTooLarge(err):
		return tooLarge(h.MaxImportBytes)
	case errors.As(err, &fe), errors.As(err, &pe):
		return err
	}
	return errBadUpload
}
