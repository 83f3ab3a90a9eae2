package code

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/workspace"
)

var (
	// ErrBadArchive is an upload that cannot become a project's tree: not
	// a .tar.gz or .zip, a path that breaks the rules, a link out.
	ErrBadArchive = fault.New(fault.BadInput, "bad_archive", "code: bad archive", "Bad archive.")
	// ErrArchiveTooLarge is an archive that unpacks to more than an
	// import takes: more entries, more bytes, or longer names.
	ErrArchiveTooLarge = fault.New(fault.BadInput, "archive_too_large", "code: archive too large", "The archive is too large.")
)

// Limits of what one import may unpack, against archive bombs, besides
// ImportLimits.MaxExpandedBytes.
const (
	maxArchiveEntries = 100_000 // files, folders and links, the archive's root and metadata included
	// maxArchiveNames bounds the names and link texts an archive's
	// entries hold together: the tree is checked whole, so they are all
	// in memory at once.
	maxArchiveNames = 32 << 20
	// maxEntryName is longer than any name that can pass the path rules,
	// whatever top folder is unwrapped.
	maxEntryName  = 3 * workspace.MaxRelPath
	maxLinkTarget = 4096 // PATH_MAX: no system follows a longer link
)

// expansion counts what an archive unpacks to while it is read, against
// the import's bounds: the entry or the byte that crosses one ends the read
// at once, before anything more of the archive is decompressed or kept.
type expansion struct {
	maxBytes int64 // ImportLimits.MaxExpandedBytes
	entries  int
	bytes    int64 // files' contents and links' texts
	names    int64 // names and links' texts, which the tree check keeps
}

// entry counts one more entry, whose name is nameLen bytes long.
func (x *expansion) entry(nameLen int) error {
	if x.entries++; x.entries > maxArchiveEntries {
		return x.tooManyEntries()
	}
	if nameLen > maxEntryName {
		return fault.Detailf(ErrBadArchive, ": an entry's name is %d bytes long, longer than any path may be", nameLen)
	}
	return x.keep(nameLen)
}

func (x *expansion) tooManyEntries() error {
	return fault.Detailf(ErrArchiveTooLarge, ": it holds more than %d entries (files, folders and links), as many as an import takes", maxArchiveEntries)
}

// keep counts n bytes of names or links' texts.
func (x *expansion) keep(n int) error {
	if x.names += int64(n); x.names > maxArchiveNames {
		return fault.Detailf(ErrArchiveTooLarge, ": its names and links take more than %s", sizeText(maxArchiveNames))
	}
	return nil
}

// add counts n bytes of contents.
func (x *expansion) add(n int64) error {
	if n < 0 || n > x.maxBytes-x.bytes {
		return fault.Detailf(ErrArchiveTooLarge, ": it unpacks to more than %s (ATELIER_IMPORT_MAX_EXPANDED_BYTES)", sizeText(x.maxBytes))
	}
	x.bytes += n
	return nil
}

// counted is r with every byte read from it counted by x; the read that
// crosses the bound fails and hands nothing on.
func (x *expansion) counted(r io.Reader) io.Reader { return &countedReader{r: r, x: x} }

type countedReader struct {
	r io.Reader
	x *expansion
}

func (c *countedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if aerr := c.x.add(int64(n)); aerr != nil {
		return 0, aerr
	}
	return n, err
}

// sizeText writes a bound the way a person reads it: "1 GiB", "32 MiB".
func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

type entryKind uint8

const (
	kindDir entryKind = iota + 1
	kindFile
	kindLink
)

// archiveEntry is one member of an archive, whatever the format. An
// archive may hold 100,000 of them, all in memory while the tree is
// checked, so it stays small (48 bytes and its name).
type archiveEntry struct {
	name       string // as the archive says, without "./" and a trailing slash
	link       string // a link's text
	size       int64
	kind       entryKind
	executable bool
}

// archive is what reading an upload learns: its entries, each file's
// content handed on as it is met. A tar's contents come in the reading
// itself, the only one; a zip's directory comes first, so its contents
// are read after it (rest), once the caller has checked the entries.
type archive struct {
	entries []archiveEntry
	// rest hands on, in order, the contents the reading did not.
	rest func(each contentFunc) error
}

// contentFunc receives the content of the archive's file entry i, e.
type contentFunc func(i int, e archiveEntry, content io.Reader) error

// writeArchiveTree writes the archive in r (gzip'd tar or zip, told by its
// first bytes) into repo as a tree and returns the tree's hash. Nothing is
// written to any filesystem, and the archive is decompressed once: file
// contents stream into git as blobs while the entries are collected, and
// only once every entry has been checked against the whole tree it
// describes (paths as for an edit, links that stay inside once every link
// of the tree is followed, no path below a link) are the blobs placed in a
// tree. A refused archive fails the build, which leaves none of its blobs
// behind. The reading counts what the archive unpacks to as it goes (what
// its entries declare, and what their contents really are) and stops at
// the first entry or byte past a bound. A single folder holding everything
// (as in a GitHub download) is unwrapped. wrote hears the size of each
// file once it is in git.
func (s *Service) writeArchiveTree(ctx context.Context, repo *gitsvc.Repo, r io.ReaderAt, size int64, wrote func(size int64)) (string, error) {
	return s.git.BuildTree(ctx, repo, func(b *gitsvc.TreeBuilder) error {
		streamed := &expansion{maxBytes: s.limits.MaxExpandedBytes}
		var blobs []gitsvc.Blob // by entry; a file's, once in git
		toGit := func(i int, e archiveEntry, content io.Reader) error {
			blob, err := b.Blob(e.size, streamed.counted(content))
			if err != nil {
				if errors.Is(err, ErrArchiveTooLarge) || errors.Is(err, ErrBadArchive) {
					return err // the archive's reader said what is wrong
				}
				return fault.Detailf(ErrBadArchive, ": %q: %w", e.name, err)
			}
			for len(blobs) <= i {
				blobs = append(blobs, 0)
			}
			blobs[i] = blob
			wrote(e.size)
			return nil
		}
		a, err := readArchive(r, size, &expansion{maxBytes: s.limits.MaxExpandedBytes}, toGit)
		if err != nil {
			return err
		}
		paths, err := planTree(a.entries)
		if err != nil {
			return err
		}
		if err := a.rest(toGit); err != nil {
			return err
		}
		for i, e := range a.entries {
			switch {
			case paths[i] == "": // the unwrapped top folder
			case e.kind == kindLink:
				err = b.Link(paths[i], e.link)
			case e.kind == kindFile:
				err = b.Place(paths[i], e.executable, blobs[i])
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// readArchive reads the entries of the archive in r, counted by x, and
// hands each file's content to each as it meets it (see archive).
func readArchive(r io.ReaderAt, size int64, x *expansion, each contentFunc) (*archive, error) {
	head := make([]byte, 4)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, fault.Detailf(ErrBadArchive, ": too short to be an archive")
	}
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return readTarGz(r, size, x, each)
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return readZip(r, size, x)
	}
	return nil, fault.Detailf(ErrBadArchive, ": upload a .tar.gz or .zip file")
}

// planTree checks the entries as the tree they make together and returns
// each entry's path in that tree ("" for the unwrapped top folder).
func planTree(entries []archiveEntry) ([]string, error) {
	prefix := commonFolder(entries)
	t := &plannedTree{root: &node{kind: kindDir}}
	paths := make([]string, len(entries))
	links := make([]*node, len(entries))
	for i, e := range entries {
		name := strings.TrimPrefix(e.name, prefix)
		if name == "" {
			continue
		}
		if err := workspace.CheckNewPath(name); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": %q: %w", e.name, err)
		}
		n, err := t.add(name, e)
		if err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": %q %w", e.name, err)
		}
		if e.kind == kindLink {
			links[i] = n
		}
		paths[i] = name
	}
	// Only now is the tree whole: a link may go through links named after
	// it in the archive.
	for i, n := range links {
		if n == nil {
			continue
		}
		if err := t.checkLink(n); err != nil {
			return nil, fault.Detailf(ErrBadArchive, ": %q %w (%q)", entries[i].name, err, entries[i].link)
		}
	}
	return paths, nil
}

// plannedTree is the tree an archive describes, as far as read so far.
type plannedTree struct {
	root     *node
	visiting int // links being followed, one inside the other
}

// node is one folder, file or link of a plannedTree.
type node struct {
	name     string
	kind     entryKind
	parent   *node
	children map[string]*node
	link     string // a link's text

	// Where a link leads, once followed, and how many links deep it goes.
	state linkState
	to    place
	depth int
}

type linkState int

const (
	unfollowed linkState = iota
	following
	followed
)

// place is where following a path arrived: an entry of the tree, and the
// components below it that name nothing in the tree (read as text, as a
// system would create them).
type place struct {
	at    *node
	extra []string
}

// A system gives up after 40 links in one lookup.
const maxLinkDepth = 40

var (
	errLinkOut  = errors.New("links outside the project")
	errLinkLoop = errors.New("is part of a loop of links")
	errLinkDeep = fmt.Errorf("goes through more than %d links", maxLinkDepth)
)

// add puts one entry into the tree. A folder may be named again; anything
// else only once, and nothing may lie below a file or a link: on disk, such
// a path would be written through the link.
func (t *plannedTree) add(name string, e archiveEntry) (*node, error) {
	dir, parts := t.root, strings.Split(name, "/")
	for i, part := range parts[:len(parts)-1] {
		child := dir.children[part]
		switch {
		case child == nil:
			child = dir.addChild(part, kindDir)
		case child.kind == kindLink:
			return nil, fmt.Errorf("lies below %q, a link", strings.Join(parts[:i+1], "/"))
		case child.kind == kindFile:
			return nil, fmt.Errorf("lies below %q, a file", strings.Join(parts[:i+1], "/"))
		}
		dir = child
	}
	leaf := parts[len(parts)-1]
	switch was := dir.children[leaf]; {
	case was == nil:
	case was.kind == kindDir && e.kind == kindDir:
		return was, nil
	case was.kind == kindDir:
		return nil, errors.New("is also a folder")
	default:
		return nil, errors.New("is named twice")
	}
	if e.kind == kindLink && (e.link == "" || path.IsAbs(e.link) || strings.IndexByte(e.link, 0) >= 0) {
		return nil, fmt.Errorf("is a link with an empty, absolute or NUL-holding target (%q)", e.link)
	}
	n := dir.addChild(leaf, e.kind)
	n.link = e.link
	return n, nil
}

func (n *node) addChild(name string, kind entryKind) *node {
	if n.children == nil {
		n.children = map[string]*node{}
	}
	c := &node{name: name, kind: kind, parent: n}
	n.children[name] = c
	return c
}

// checkLink follows the link n through the whole tree, component by
// component and through every link it meets on the way, as a system
// resolving it on disk would. It must end inside the tree and not in .git.
func (t *plannedTree) checkLink(n *node) error {
	if err := t.follow(n); err != nil {
		return err
	}
	var parts []string
	for at := n.to.at; at != t.root; at = at.parent {
		parts = append(parts, at.name)
	}
	slices.Reverse(parts)
	if parts = append(parts, n.to.extra...); len(parts) > 0 {
		if err := workspace.CheckRelPath(strings.Join(parts, "/")); err != nil {
			return fmt.Errorf("links to a path that is refused: %w", err)
		}
	}
	return nil
}

// follow finds where the link n leads and keeps it in n. Each link is
// followed once, however many links go through it, and each step costs the
// same whatever the depth, so the work is bounded by the links' text.
func (t *plannedTree) follow(n *node) error {
	switch {
	case n.state == followed:
		return nil
	case n.state == following:
		return errLinkLoop
	case t.visiting >= maxLinkDepth:
		return errLinkDeep
	}
	n.state = following
	t.visiting++
	defer func() { t.visiting-- }()

	p, depth := place{at: n.parent}, 1
	for comp := range strings.SplitSeq(n.link, "/") {
		switch {
		case comp == "" || comp == ".":
		case comp == ".." && len(p.extra) > 0:
			p.extra = p.extra[:len(p.extra)-1]
		case comp == "..":
			if p.at == t.root {
				return errLinkOut
			}
			p.at = p.at.parent
		case len(p.extra) > 0 || p.at.children[comp] == nil:
			p.extra = append(p.extra, comp)
		case p.at.children[comp].kind == kindLink:
			via := p.at.children[comp]
			if err := t.follow(via); err != nil {
				return err
			}
			if depth = max(depth, via.depth+1); depth > maxLinkDepth {
				return errLinkDeep
			}
			p = place{at: via.to.at, extra: slices.Clone(via.to.extra)}
		default:
			p.at = p.at.children[comp]
		}
	}
	n.state, n.to, n.depth = followed, p, depth
	return nil
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

// readTarGz reads a gzip'd tar, counting each header against x as it
// comes: a header's declared size is counted before its content is
// decompressed, and a file's content goes to each before the next header.
// A tar has no index, so this one pass is the only one.
func readTarGz(r io.ReaderAt, size int64, x *expansion, each contentFunc) (*archive, error) {
	a := &archive{rest: func(contentFunc) error { return nil }}
	err := walkTar(r, size, func(h *tar.Header, content io.Reader) error {
		// Every header counts, those skipped below included: their
		// contents are decompressed all the same.
		if err := x.entry(len(h.Name)); err != nil {
			return err
		}
		if err := x.add(max(h.Size, 0) + int64(len(h.Linkname))); err != nil {
			return err
		}
		if skippedTar(h) {
			return nil
		}
		e := archiveEntry{name: cleanName(h.Name)}
		switch h.Typeflag {
		case tar.TypeDir:
			e.kind = kindDir
		case tar.TypeSymlink:
			if len(h.Linkname) > maxLinkTarget {
				return fault.Detailf(ErrBadArchive, ": %q is a link of more than %d bytes", h.Name, maxLinkTarget)
			}
			if err := x.keep(len(h.Linkname)); err != nil {
				return err
			}
			e.kind, e.link = kindLink, h.Linkname
		case tar.TypeReg:
			e.kind, e.size, e.executable = kindFile, h.Size, h.Mode&0o111 != 0
		default:
			return fault.Detailf(ErrBadArchive, ": %q is neither a file, a folder nor a link", h.Name)
		}
		a.entries = append(a.entries, e)
		if e.kind == kindFile {
			return each(len(a.entries)-1, e, content)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// skippedTar tells the tar members that are no entry of the tree: pax
// metadata (git archive's commit id) and the root itself.
func skippedTar(h *tar.Header) bool {
	return h.Typeflag == tar.TypeXGlobalHeader || cleanName(h.Name) == ""
}

// walkTar calls each for every member of the gzip'd tar, in order.
func walkTar(r io.ReaderAt, size int64, each func(h *tar.Header, content io.Reader) error) error {
	gz, err := gzip.NewReader(bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 256<<10))
	if err != nil {
		return fault.Detailf(ErrBadArchive, ": %w", err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fault.Detailf(ErrBadArchive, ": %w", err)
		}
		if err := each(h, tr); err != nil {
			return err
		}
	}
}
