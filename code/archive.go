package code

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"atelier/fault"
	"atelier/workspace"
)

// ErrBadArchive is an upload that cannot become a project's tree: not a
// .tar.gz or .zip, a path that breaks the rules, a link out, too big.
var ErrBadArchive = fault.New(fault.BadInput, "bad_archive", "code: bad archive", "Bad archive.")

// Limits of what one import may unpack, against archive bombs.
const (
	maxArchiveFiles = 100_000
	maxArchiveBytes = 2 << 30 // unpacked
)

// archiveFile is one entry of an archive, whatever the format.
type archiveFile struct {
	name string
	mode fs.FileMode
	link string // symlink target
	open func() (io.ReadCloser, error)
}

// unpack writes the archive in r (gzip'd tar or zip, told by its first
// bytes) into the empty folder dest. Every path must pass the same checks as
// an edit, links must stay inside the tree, and nothing but files, folders
// and such links is accepted. A single folder holding everything (as in a
// GitHub download) is unwrapped.
func unpack(r io.ReaderAt, size int64, dest string) error {
	head := make([]byte, 4)
	if _, err := r.ReadAt(head, 0); err != nil {
		return fault.Detailf(ErrBadArchive, ": too short to be an archive")
	}
	var files []archiveFile
	var err error
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		var spool *os.File
		files, spool, err = readTarGz(io.NewSectionReader(r, 0, size))
		if spool != nil {
			defer spool.Close()
		}
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		files, err = readZip(r, size)
	default:
		return fault.Detailf(ErrBadArchive, ": upload a .tar.gz or .zip file")
	}
	if err != nil {
		return err
	}
	prefix := commonFolder(files)
	var total int64
	for _, f := range files {
		name := strings.TrimPrefix(f.name, prefix)
		if name == "" {
			continue
		}
		if err := workspace.CheckRelPath(name); err != nil {
			return fault.Detailf(ErrBadArchive, ": %q: %w", f.name, err)
		}
		target := filepath.Join(dest, name)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		switch {
		case f.mode.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case f.mode&fs.ModeSymlink != 0:
			if !linkStaysInside(name, f.link) {
				return fault.Detailf(ErrBadArchive, ": %q links outside the project (%q)", f.name, f.link)
			}
			if err := os.Symlink(f.link, target); err != nil {
				return fault.Detailf(ErrBadArchive, ": %q: %w", f.name, err)
			}
		case f.mode.IsRegular():
			n, err := writeFile(target, f, maxArchiveBytes-total)
			if err != nil {
				return err
			}
			total += n
		default:
			return fault.Detailf(ErrBadArchive, ": %q is neither a file, a folder nor a link", f.name)
		}
	}
	return nil
}

func writeFile(target string, f archiveFile, budget int64) (int64, error) {
	rc, err := f.open()
	if err != nil {
		return 0, fault.Detailf(ErrBadArchive, ": %q: %w", f.name, err)
	}
	defer rc.Close()
	perm := fs.FileMode(0o644)
	if f.mode&0o111 != 0 {
		perm = 0o755
	}
	// O_EXCL: an archive naming a path twice, or a path under one of its
	// own links, must not write through that link.
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return 0, fault.Detailf(ErrBadArchive, ": %q: %w", f.name, err)
	}
	n, err := io.Copy(out, io.LimitReader(rc, budget+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fault.Detailf(ErrBadArchive, ": %q: %w", f.name, err)
	}
	if n > budget {
		return n, fault.Detailf(ErrBadArchive, ": more than %d GiB unpacked", maxArchiveBytes>>30)
	}
	return n, nil
}

// linkStaysInside reports whether a link at name pointing at target
// resolves inside the tree.
func linkStaysInside(name, target string) bool {
	if target == "" || path.IsAbs(target) || strings.ContainsRune(target, 0) {
		return false
	}
	resolved := path.Join(path.Dir(name), target)
	return resolved != ".." && !strings.HasPrefix(resolved, "../")
}

// commonFolder returns "top/" when every entry lies in one top folder.
func commonFolder(files []archiveFile) string {
	top := ""
	for _, f := range files {
		first, _, nested := strings.Cut(f.name, "/")
		if !nested && !f.mode.IsDir() {
			return ""
		}
		if top == "" {
			top = first
		} else if first != top {
			return ""
		}
	}
	if top == "" {
		return ""
	}
	return top + "/"
}

// readTarGz reads a gzip'd tar. A tar stream reads once, so file contents are
// spooled into an unlinked temp file, which the caller closes.
func readTarGz(r io.Reader) (files []archiveFile, spool *os.File, err error) {
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, nil, fault.Detailf(ErrBadArchive, ": %w", err)
	}
	tmp, err := os.CreateTemp("", "atelier-import-*")
	if err != nil {
		return nil, nil, err
	}
	os.Remove(tmp.Name()) // unlinked: it vanishes when closed
	tr := tar.NewReader(gz)
	var offset int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, tmp, fault.Detailf(ErrBadArchive, ": %w", err)
		}
		if len(files) >= maxArchiveFiles {
			return nil, tmp, fault.Detailf(ErrBadArchive, ": more than %d entries", maxArchiveFiles)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if name == "" || name == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			continue // pax metadata, e.g. git archive's commit id
		case tar.TypeDir:
			files = append(files, archiveFile{name: name, mode: fs.ModeDir | 0o755})
		case tar.TypeSymlink:
			files = append(files, archiveFile{name: name, mode: fs.ModeSymlink, link: h.Linkname})
		case tar.TypeReg:
			if offset+h.Size > maxArchiveBytes {
				return nil, tmp, fault.Detailf(ErrBadArchive, ": more than %d GiB unpacked", maxArchiveBytes>>30)
			}
			n, err := io.Copy(tmp, tr)
			if err != nil {
				return nil, tmp, fault.Detailf(ErrBadArchive, ": %q: %w", h.Name, err)
			}
			section := io.NewSectionReader(tmp, offset, n)
			offset += n
			files = append(files, archiveFile{name: name, mode: fs.FileMode(h.Mode) & 0o777,
				open: func() (io.ReadCloser, error) { return io.NopCloser(section), nil }})
		default:
			return nil, tmp, fault.Detailf(ErrBadArchive, ": %q is neither a file, a folder nor a link", h.Name)
		}
	}
	return files, tmp, nil
}

func readZip(r io.ReaderAt, size int64) ([]archiveFile, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fault.Detailf(ErrBadArchive, ": %w", err)
	}
	if len(zr.File) > maxArchiveFiles {
		return nil, fault.Detailf(ErrBadArchive, ": more than %d entries", maxArchiveFiles)
	}
	var files []archiveFile
	for _, zf := range zr.File {
		name := strings.TrimSuffix(strings.TrimPrefix(zf.Name, "./"), "/")
		if name == "" {
			continue
		}
		mode := zf.Mode()
		af := archiveFile{name: name, mode: mode, open: zf.Open}
		switch {
		case mode.IsDir():
		case mode&fs.ModeSymlink != 0:
			rc, err := zf.Open()
			if err != nil {
				return nil, fault.Detailf(ErrBadArchive, ": %q: %w", zf.Name, err)
			}
			link, err := io.ReadAll(io.LimitReader(rc, 4096))
			rc.Close()
			if err != nil {
				return nil, fault.Detailf(ErrBadArchive, ": %q: %w", zf.Name, err)
			}
			af.link = string(link)
		case mode.IsRegular():
		default:
			return nil, fault.Detailf(ErrBadArchive, ": %q is neither a file, a folder nor a link", zf.Name)
		}
		files = append(files, af)
	}
	return files, nil
}
