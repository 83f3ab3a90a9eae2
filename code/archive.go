package code

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"atelier/gitsvc"
	"atelier/workspace"
)

// ErrBadArchive is an upload that cannot become a project's tree: not a
// .tar.gz or .zip, a path that breaks the rules, a link out, too big.
var ErrBadArchive = errors.New("code: bad archive")

// Limits of what one import may unpack, against archive bombs.
const (
	maxArchiveFiles = 100_000
	maxArchiveBytes = 2 << 30 // unpacked, link texts included
	maxLinkTarget   = 4096    // PATH_MAX: no system follows a longer link
)

type entryKind int

const (
	kindDir entryKind = iota + 1
	kindFile
	kindLink
)

// archiveEntry is one member of an archive, whatever the format.
type archiveEntry struct {
	name       string // as the archive says, without "./" and a trailing slash
	kind       entryKind
	executable bool
	size       int64
	link       string    // a link's text
	zf         *zip.File // a zip member's content
}

// archive is what the first reading of an upload learns: its entries, and
// how to read their contents again in the same order.
type archive struct {
	entries []archiveEntry
	// contents calls each with the index and content of every file entry,
	// in order.
	contents func(each func(i int, content io.Reader) error) error
}

// writeArchiveTree writes the archive in r (gzip'd tar or zip, told by its
// first bytes) into repo as a tree and returns the tree's hash. Nothing is
// written to any filesystem: the archive is read once to check every entry
// against the whole tree it describes (paths as for an edit, links that
// stay inside once every link of the tree is followed, no path below a
// link), and only then a second time to stream file contents into git. A
// single folder holding everything (as in a GitHub download) is unwrapped.
func (s *Service) writeArchiveTree(ctx context.Context, repo *gitsvc.Repo, r io.ReaderAt, size int64) (string, error) {
	a, err := readArchive(r, size)
	if err != nil {
		return "", err
	}
	paths, err := planTree(a.entries)
	if err != nil {
		return "", err
	}
	return s.git.BuildTree(ctx, repo, func(b *gitsvc.TreeBuilder) error {
		for i, e := range a.entries {
			if e.kind == kindLink && paths[i] != "" {
				if err := b.Link(paths[i], e.link); err != nil {
					return err
				}
			}
		}
		return a.contents(func(i int, content io.Reader) error {
			e := a.entries[i]
			if err := b.File(paths[i], e.executable, e.size, content); err != nil {
				return fmt.Errorf("%w: %q: %w", ErrBadArchive, e.name, err)
			}
			return nil
		})
	})
}

func readArchive(r io.ReaderAt, size int64) (*archive, error) {
	head := make([]byte, 4)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("%w: too short to be an archive", ErrBadArchive)
	}
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return readTarGz(r, size)
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return readZip(r, size)
	}
	return nil, fmt.Errorf("%w: upload a .tar.gz or .zip file", ErrBadArchive)
}

// planTree checks the entries as the tree they make together and returns
// each entry's path in that tree ("" for the unwrapped top folder).
func planTree(entries []archiveEntry) ([]string, error) {
	prefix := commonFolder(entries)
	t := &plannedTree{kinds: map[string]entryKind{}, links: map[string]string{}}
	paths := make([]string, len(entries))
	var total int64
	for i, e := range entries {
		name := strings.TrimPrefix(e.name, prefix)
		if name == "" {
			continue
		}
		if err := workspace.CheckRelPath(name); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrBadArchive, e.name, err)
		}
		if total += e.size + int64(len(e.link)); total > maxArchiveBytes {
			return nil, fmt.Errorf("%w: more than %d GiB unpacked", ErrBadArchive, maxArchiveBytes>>30)
		}
		if err := t.add(name, e); err != nil {
			return nil, fmt.Errorf("%w: %q %w", ErrBadArchive, e.name, err)
		}
		paths[i] = name
	}
	for i, e := range entries {
		if e.kind != kindLink || paths[i] == "" {
			continue
		}
		if err := t.checkLink(paths[i]); err != nil {
			return nil, fmt.Errorf("%w: %q %w (%q)", ErrBadArchive, e.name, err, e.link)
		}
	}
	return paths, nil
}

// plannedTree is the tree an archive describes, as far as read so far.
type plannedTree struct {
	kinds    map[string]entryKind
	links    map[string]string   // path → text
	resolved map[string][]string // path → where the link leads, once known
	visiting map[string]bool     // links being resolved, to tell a loop
}

var (
	errLinkOut  = errors.New("links outside the project")
	errLinkLoop = errors.New("is part of a loop of links")
)

// add puts one entry into the tree. A folder may be named again; anything
// else only once, and nothing may lie below a file or a link: on disk, such
// a path would be written through the link.
func (t *plannedTree) add(name string, e archiveEntry) error {
	for i := strings.IndexByte(name, '/'); i >= 0; i = next(name, i) {
		dir := name[:i]
		switch t.kinds[dir] {
		case kindLink:
			return fmt.Errorf("lies below %q, a link", dir)
		case kindFile:
			return fmt.Errorf("lies below %q, a file", dir)
		}
		t.kinds[dir] = kindDir
	}
	switch was := t.kinds[name]; {
	case was == kindDir && e.kind == kindDir:
		return nil
	case was == kindDir:
		return errors.New("is also a folder")
	case was != 0:
		return errors.New("is named twice")
	}
	t.kinds[name] = e.kind
	if e.kind == kindLink {
		if e.link == "" || path.IsAbs(e.link) || strings.IndexByte(e.link, 0) >= 0 {
			return fmt.Errorf("is a link with an empty, absolute or NUL-holding target (%q)", e.link)
		}
		t.links[name] = e.link
	}
	return nil
}

// next is the index of the slash after the one at i in name, or -1.
func next(name string, i int) int {
	j := strings.IndexByte(name[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// checkLink follows the link at name through the whole tree, component by
// component and through every link it meets on the way, as a system
// resolving it on disk would. It must end inside the tree and not in .git.
func (t *plannedTree) checkLink(name string) error {
	at, err := t.resolveLink(name)
	if err != nil {
		return err
	}
	if len(at) > 0 {
		if err := workspace.CheckRelPath(strings.Join(at, "/")); err != nil {
			return fmt.Errorf("links to a path that is refused: %w", err)
		}
	}
	return nil
}

// resolveLink returns the components of the path the link at name leads
// to. Each link's answer is kept, so a chain of links is walked once,
// however many links go through it.
func (t *plannedTree) resolveLink(name string) ([]string, error) {
	if at, ok := t.resolved[name]; ok {
		return at, nil
	}
	if t.visiting[name] {
		return nil, errLinkLoop
	}
	if t.resolved == nil {
		t.resolved, t.visiting = map[string][]string{}, map[string]bool{}
	}
	t.visiting[name] = true
	defer delete(t.visiting, name)

	dir := strings.Split(name, "/")
	at := dir[: len(dir)-1 : len(dir)-1]
	for comp := range strings.SplitSeq(t.links[name], "/") {
		switch comp {
		case "", ".":
			continue
		case "..":
			if len(at) == 0 {
				return nil, errLinkOut
			}
			at = at[:len(at)-1]
			continue
		}
		at = append(at, comp)
		p := strings.Join(at, "/")
		if t.kinds[p] != kindLink {
			continue
		}
		via, err := t.resolveLink(p)
		if err != nil {
			return nil, err
		}
		at = append(at[:0:0], via...)
	}
	t.resolved[name] = at
	return at, nil
}

// commonFolder returns "top/" when every entry lies in one top folder.
func commonFolder(entries []archiveEntry) string {
	top := ""
	for _, e := range entries {
		first, _, nested := strings.Cut(e.name, "/")
		if !nested && e.kind != kindDir {
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

// cleanName is an archive member's name as entries keep it; "" for the
// archive's own root, which is skipped.
func cleanName(name string) string {
	name = strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
	if name == "." {
		return ""
	}
	return name
}

// readTarGz reads a gzip'd tar's headers. A tar has no index, so the
// contents are read by a second pass over the same bytes.
func readTarGz(r io.ReaderAt, size int64) (*archive, error) {
	a := &archive{}
	err := walkTar(r, size, func(h *tar.Header, _ io.Reader) error {
		if len(a.entries) >= maxArchiveFiles {
			return fmt.Errorf("%w: more than %d entries", ErrBadArchive, maxArchiveFiles)
		}
		e := archiveEntry{name: cleanName(h.Name)}
		switch h.Typeflag {
		case tar.TypeDir:
			e.kind = kindDir
		case tar.TypeSymlink:
			if len(h.Linkname) > maxLinkTarget {
				return fmt.Errorf("%w: %q is a link of more than %d bytes", ErrBadArchive, h.Name, maxLinkTarget)
			}
			e.kind, e.link = kindLink, h.Linkname
		case tar.TypeReg:
			e.kind, e.size, e.executable = kindFile, h.Size, h.Mode&0o111 != 0
		default:
			return fmt.Errorf("%w: %q is neither a file, a folder nor a link", ErrBadArchive, h.Name)
		}
		a.entries = append(a.entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.contents = func(each func(int, io.Reader) error) error {
		i := -1
		return walkTar(r, size, func(h *tar.Header, content io.Reader) error {
			i++
			if i >= len(a.entries) || a.entries[i].name != cleanName(h.Name) {
				return fmt.Errorf("%w: the archive changed while it was read", ErrBadArchive)
			}
			if a.entries[i].kind != kindFile {
				return nil
			}
			return each(i, content)
		})
	}
	return a, nil
}

// walkTar calls each for every member of the gzip'd tar that becomes an
// entry, the same ones on every walk.
func walkTar(r io.ReaderAt, size int64, each func(h *tar.Header, content io.Reader) error) error {
	gz, err := gzip.NewReader(bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 256<<10))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadArchive, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader || cleanName(h.Name) == "" {
			continue // pax metadata (git archive's commit id), the root itself
		}
		if err := each(h, tr); err != nil {
			return err
		}
	}
}

// readZip reads a zip's central directory and the text of its links.
func readZip(r io.ReaderAt, size int64) (*archive, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadArchive, err)
	}
	if len(zr.File) > maxArchiveFiles {
		return nil, fmt.Errorf("%w: more than %d entries", ErrBadArchive, maxArchiveFiles)
	}
	a := &archive{}
	for _, zf := range zr.File {
		e := archiveEntry{name: cleanName(zf.Name), zf: zf}
		if e.name == "" {
			continue
		}
		switch mode := zf.Mode(); {
		case mode.IsDir():
			e.kind = kindDir
		case mode&fs.ModeSymlink != 0:
			link, err := readLinkText(zf)
			if err != nil {
				return nil, err
			}
			e.kind, e.link = kindLink, link
		case mode.IsRegular():
			if zf.UncompressedSize64 > maxArchiveBytes {
				return nil, fmt.Errorf("%w: more than %d GiB unpacked", ErrBadArchive, maxArchiveBytes>>30)
			}
			e.kind, e.size, e.executable = kindFile, int64(zf.UncompressedSize64), mode&0o111 != 0
		default:
			return nil, fmt.Errorf("%w: %q is neither a file, a folder nor a link", ErrBadArchive, zf.Name)
		}
		a.entries = append(a.entries, e)
	}
	a.contents = func(each func(int, io.Reader) error) error {
		for i, e := range a.entries {
			if e.kind != kindFile {
				continue
			}
			if err := openAndRead(e, i, each); err != nil {
				return err
			}
		}
		return nil
	}
	return a, nil
}

func openAndRead(e archiveEntry, i int, each func(int, io.Reader) error) error {
	rc, err := e.zf.Open()
	if err != nil {
		return fmt.Errorf("%w: %q: %w", ErrBadArchive, e.zf.Name, err)
	}
	defer rc.Close()
	return each(i, rc)
}

// readLinkText reads a zip link's text, its content.
func readLinkText(zf *zip.File) (string, error) {
	rc, err := zf.Open()
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBadArchive, zf.Name, err)
	}
	defer rc.Close()
	link, err := io.ReadAll(io.LimitReader(rc, maxLinkTarget+1))
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBadArchive, zf.Name, err)
	}
	if len(link) > maxLinkTarget {
		return "", fmt.Errorf("%w: %q is a link of more than %d bytes", ErrBadArchive, zf.Name, maxLinkTarget)
	}
	return string(link), nil
}
