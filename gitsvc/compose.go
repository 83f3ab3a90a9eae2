package gitsvc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"atelier/fault"
)

// TreeEdit is one path of a composed commit: new content, an object the
// repository already has, or a deletion.
type TreeEdit struct {
	Path    string
	Content []byte // written as a blob, byte for byte
	OID     string // instead of Content: an existing blob
	Mode    string // with OID: its mode; with Content the base's mode is kept
	Deleted bool
}

// Signature is who authored a commit.
type Signature struct {
	Name, Email string
}

// ComposeCommit writes, under r's write lock and without a work tree, one
// commit whose tree is parent's tree with edits applied and whose only
// parent is parent, authored by author with message, and points ref (a
// full ref name under refs/changes/) at it so it stays reachable. One
// git fast-import does it all: it reads only the folders of parent's tree
// that the edits touch, so the cost follows the edits, not the repository.
func (s *Service) ComposeCommit(ctx context.Context, r *Repo, parent string, edits []TreeEdit, author Signature, message, ref string) (string, error) {
	if err := checkOIDs([]string{parent}); err != nil {
		return "", err
	}
	if !strings.HasPrefix(ref, "refs/changes/") || checkValue(ref) != nil || strings.ContainsAny(ref, " \n~^:?*[\\") {
		return "", fault.Detailf(ErrBadArgument, ": ref %q", ref)
	}
	if strings.ContainsAny(author.Name+author.Email, "<>\n\x00") {
		return "", fault.Detailf(ErrBadArgument, ": author %q", author.Name)
	}
	// The same path rules as a built tree: clean, relative, no .git, once.
	check := &TreeBuilder{kinds: map[string]bool{}}
	for _, e := range edits {
		if err := check.add(e.Path, modeFile, 0); err != nil {
			return "", err
		}
		if e.OID != "" && (!isOID(e.OID) || (e.Mode != "100644" && e.Mode != "100755" && e.Mode != "120000")) {
			return "", fault.Detailf(ErrBadArgument, ": entry %q", e.Path)
		}
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer release()
	modes, err := s.modesAt(ctx, r, parent, edits)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(s.tmp, "compose-")
	if err != nil {
		return "", fmt.Errorf("gitsvc: compose: %w", err)
	}
	defer os.RemoveAll(tmp)
	marks := filepath.Join(tmp, "marks")

	var in bytes.Buffer
	fmt.Fprintf(&in, "commit %s\nmark :1\nauthor %s <%s> now\ncommitter Atelier <atelier@localhost> now\ndata %d\n%s\nfrom %s\n",
		ref, author.Name, author.Email, len(message), message, parent)
	for _, e := range edits {
		switch {
		case e.Deleted:
			fmt.Fprintf(&in, "D %s\n", quotePath(e.Path))
		case e.OID != "":
			fmt.Fprintf(&in, "M %s %s %s\n", e.Mode, e.OID, quotePath(e.Path))
		default:
			mode := "100644"
			if modes[e.Path] == "100755" {
				mode = "100755"
			}
			fmt.Fprintf(&in, "M %s inline %s\ndata %d\n", mode, quotePath(e.Path), len(e.Content))
			in.Write(e.Content)
			in.WriteString("\n")
		}
	}
	in.WriteString("done\n")
	c := newCommand("fast-import", "--quiet", "--done", "--date-format=now").lit(lit("--export-marks=" + marks))
	if _, err := s.run(ctx, c, runOpts{repo: r, stdin: &in}); err != nil {
		return "", err
	}
	oids, err := readMarks(marks, 1)
	if err != nil {
		return "", err
	}
	return oids[0], nil
}

// quotePath is path as fast-import reads it: always C-quoted, so no path
// is taken for a mark, a quote or the end of the line.
func quotePath(p string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// modesAt returns the modes parent's tree gives the edited paths that it
// has as files.
func (s *Service) modesAt(ctx context.Context, r *Repo, parent string, edits []TreeEdit) (map[string]string, error) {
	c := newCommand("ls-tree", "-z", "-l", "--full-tree", "--end-of-options").val(parent).lit("--")
	n := 0
	for _, e := range edits {
		if !e.Deleted && e.OID == "" {
			c.lit(lit(e.Path)) // after "--": a path, never an option
			n++
		}
	}
	modes := map[string]string{}
	if n == 0 {
		return modes, nil
	}
	out, err := s.run(ctx, c, runOpts{repo: r, env: []string{"GIT_LITERAL_PATHSPECS=1"}})
	if err != nil {
		return nil, err
	}
	es, err := parseTree(out)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		modes[e.Path] = e.Mode
	}
	return modes, nil
}

// ChangedPaths lists the paths whose entry differs between the commits
// from and to (renames are a deletion and an addition).
func (s *Service) ChangedPaths(ctx context.Context, r *Repo, from, to string) ([]string, error) {
	es, err := s.Diff(ctx, r, from, to)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(es))
	for i, e := range es {
		paths[i] = e.Path
	}
	return paths, nil
}

// Diff returns what to has in place of from, path by path, as edits that
// make from's tree into to's.
func (s *Service) Diff(ctx context.Context, r *Repo, from, to string) ([]TreeEdit, error) {
	if err := checkOIDs([]string{from, to}); err != nil {
		return nil, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return nil, err
	}
	defer release()
	c := newCommand("diff-tree", "-r", "-z", "--no-renames", "--end-of-options").val(from).val(to)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if err != nil {
		return nil, err
	}
	// ":<old mode> <new mode> <old oid> <new oid> <status>\0<path>\0" …
	var es []TreeEdit
	fields := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(fields) == 1 && fields[0] == "" {
		return nil, nil
	}
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("gitsvc: diff-tree: unexpected output %q", out)
	}
	for i := 0; i < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) != 5 {
			return nil, fmt.Errorf("gitsvc: diff-tree: unexpected line %q", fields[i])
		}
		e := TreeEdit{Path: fields[i+1]}
		if meta[4] == "D" {
			e.Deleted = true
		} else {
			e.Mode, e.OID = meta[1], meta[3]
		}
		es = append(es, e)
	}
	return es, nil
}

// CopyCommit copies commit and the objects it needs that have does not
// already bring (have may be "") from `from` into `into`: git packs them
// in from, and into indexes the pack (checking every object), as into's
// owner when it has one. Neither repository is locked here: the caller
// holds what it needs.
func (s *Service) CopyCommit(ctx context.Context, from, into *Repo, commit, have string) error {
	oids := []string{commit}
	if have != "" {
		oids = append(oids, have)
	}
	if err := checkOIDs(oids); err != nil {
		return err
	}
	var list []byte
	var err error
	if have == "" {
		c := newCommand("rev-list", "--objects", "--no-walk", "--end-of-options").val(commit)
		list, err = s.run(ctx, c, runOpts{repo: from})
	} else {
		list, err = s.newObjects(ctx, from, have, commit)
	}
	if err != nil {
		return fmt.Errorf("gitsvc: copy %s: list: %w", commit, err)
	}
	if err := s.packInto(ctx, from, into, list); err != nil {
		return fmt.Errorf("gitsvc: copy %s: %w", commit, err)
	}
	return nil
}

// newObjects lists what commit adds to its parent have: itself, its root
// tree, and the trees and blobs diff-tree finds changed. diff-tree descends
// only into folders that differ, so the cost follows the change, where
// `rev-list commit ^have` would walk have's whole tree to exclude it.
func (s *Service) newObjects(ctx context.Context, r *Repo, have, commit string) ([]byte, error) {
	root, err := s.resolve(ctx, r, commit+"^{tree}")
	if err != nil {
		return nil, err
	}
	c := newCommand("diff-tree", "-r", "-t", "-z", "--no-renames", "--end-of-options").val(have).val(commit)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if err != nil {
		return nil, err
	}
	var list bytes.Buffer
	list.WriteString(commit + "\n" + root + "\n")
	fields := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(fields[i], ":"))
		if len(meta) != 5 || meta[4] == "D" || meta[1] == "160000" {
			continue // gone, or a submodule's commit, which lives elsewhere
		}
		list.WriteString(meta[3] + "\n")
	}
	return list.Bytes(), nil
}

// MoveBranch moves refs/heads/<branch> of r from old to new, and only from
// old (ErrConflict otherwise), under r's write lock.
func (s *Service) MoveBranch(ctx context.Context, r *Repo, branch, newCommit, old string) error {
	if err := checkOIDs([]string{newCommit, old}); err != nil {
		return err
	}
	if branch == "" || checkValue(branch) != nil || strings.ContainsAny(branch, " ~^:?*[\\") {
		return fault.Detailf(ErrBadArgument, ": branch %q", branch)
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return err
	}
	defer release()
	update := newCommand("update-ref", "--end-of-options").val("refs/heads/" + branch).val(newCommit).val(old)
	if _, err := s.run(ctx, update, runOpts{repo: r}); err != nil {
		if isStale(err) {
			return fmt.Errorf("gitsvc: move %s to %s: %w: %w", branch, newCommit, ErrConflict, err)
		}
		return err
	}
	return nil
}

// WorkTreeClean reports whether r's work tree and index match HEAD with
// no untracked file either (ignored files do not count). git runs as the
// folder's owner.
func (s *Service) WorkTreeClean(ctx context.Context, r *Repo) (bool, error) {
	if r.WorkTree == "" {
		return false, fault.Detailf(ErrBadArgument, ": %s has no work tree", r.GitDir)
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return false, err
	}
	defer release()
	out, err := s.run(ctx, newCommand("status", "--porcelain=v1", "-z", "--untracked-files=all"), runOpts{repo: r, workTree: r.WorkTree})
	if err != nil {
		return false, err
	}
	return len(out) == 0, nil
}

// MoveWorkTree moves r's branch from old to newCommit together with its
// index and work tree (`read-tree -m -u`, which refuses to overwrite
// anything that is not old's), under r's write lock, as the folder's
// owner: forward to a release, or back when it is not recorded. r must
// have newCommit's objects (CopyCommit).
func (s *Service) MoveWorkTree(ctx context.Context, r *Repo, branch, old, newCommit string) error {
	if err := checkOIDs([]string{old, newCommit}); err != nil {
		return err
	}
	if r.WorkTree == "" {
		return fault.Detailf(ErrBadArgument, ": %s has no work tree", r.GitDir)
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return err
	}
	defer release()
	o := runOpts{repo: r, workTree: r.WorkTree}
	if _, err := s.run(ctx, newCommand("read-tree", "-m", "-u", "--end-of-options").val(old).val(newCommit), o); err != nil {
		return err
	}
	update := newCommand("update-ref", "--end-of-options").val("refs/heads/" + branch).val(newCommit).val(old)
	if _, err := s.run(ctx, update, o); err != nil {
		if isStale(err) {
			return fmt.Errorf("gitsvc: move %s to %s: %w: %w", branch, newCommit, ErrConflict, err)
		}
		return err
	}
	return nil
}
