package gitsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// zeroOID removes a path from an index.
const zeroOID = "0000000000000000000000000000000000000000"

// ComposeCommit writes, under r's write lock and without a work tree, one
// commit whose tree is parent's tree with edits applied and whose only
// parent is parent, authored by author with message; ref (a full ref name
// under refs/changes/) is set to it so it stays reachable. Blobs stream
// into fast-import, the tree is made from a temporary index read from
// parent's tree, so the cost follows the edits, not the repository.
func (s *Service) ComposeCommit(ctx context.Context, r *Repo, parent string, edits []TreeEdit, author Signature, message, ref string) (string, error) {
	if err := checkOIDs([]string{parent}); err != nil {
		return "", err
	}
	if !strings.HasPrefix(ref, "refs/changes/") || checkValue(ref) != nil {
		return "", fault.Detailf(ErrBadArgument, ": ref %q", ref)
	}
	if strings.ContainsAny(author.Name+author.Email, "<>\n\x00") {
		return "", fault.Detailf(ErrBadArgument, ": author %q", author.Name)
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer release()
	tmp, err := os.MkdirTemp(s.tmp, "compose-")
	if err != nil {
		return "", fmt.Errorf("gitsvc: compose: %w", err)
	}
	defer os.RemoveAll(tmp)

	modes, err := s.modesAt(ctx, r, parent, edits)
	if err != nil {
		return "", err
	}
	// Contents first, as blobs with marks, in the order of edits.
	b := &TreeBuilder{kinds: map[string]bool{}}
	var written []int // index in edits of each mark
	marks := filepath.Join(tmp, "marks")
	err = s.importBlobs(ctx, r, marks, b, func(b *TreeBuilder) error {
		for i, e := range edits {
			if e.Deleted || e.OID != "" {
				continue
			}
			if err := b.File(e.Path, modes[e.Path] == "100755", int64(len(e.Content)), bytes.NewReader(e.Content)); err != nil {
				return err
			}
			written = append(written, i)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	oids, err := readMarks(marks, len(written))
	if err != nil {
		return "", err
	}
	blob := map[int]string{}
	for m, i := range written {
		blob[i] = oids[m]
	}

	var info strings.Builder
	for i, e := range edits {
		if err := checkPath(e.Path); err != nil || e.Path == "" {
			return "", fault.Detailf(ErrBadArgument, ": path %q", e.Path)
		}
		switch {
		case e.Deleted:
			fmt.Fprintf(&info, "0 %s\t%s\x00", zeroOID, e.Path)
		case e.OID != "":
			if !isOID(e.OID) || (e.Mode != "100644" && e.Mode != "100755" && e.Mode != "120000") {
				return "", fault.Detailf(ErrBadArgument, ": entry %q", e.Path)
			}
			fmt.Fprintf(&info, "%s %s\t%s\x00", e.Mode, e.OID, e.Path)
		default:
			mode := "100644"
			if modes[e.Path] == "100755" {
				mode = "100755"
			}
			fmt.Fprintf(&info, "%s %s\t%s\x00", mode, blob[i], e.Path)
		}
	}
	o := runOpts{repo: r, env: []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}}
	if _, err := s.run(ctx, newCommand("read-tree", "--end-of-options").val(parent), o); err != nil {
		return "", err
	}
	o.stdin = strings.NewReader(info.String())
	if _, err := s.run(ctx, newCommand("update-index", "-z", "--index-info"), o); err != nil {
		return "", err
	}
	o.stdin = nil
	out, err := s.run(ctx, newCommand("write-tree"), o)
	if err != nil {
		return "", err
	}
	tree := strings.TrimSpace(string(out))
	if !isOID(tree) {
		return "", fmt.Errorf("gitsvc: write-tree: unexpected output %q", out)
	}
	c := newCommand("commit-tree", "-p").val(parent).lit("--end-of-options").val(tree)
	env := []string{"GIT_AUTHOR_NAME=" + author.Name, "GIT_AUTHOR_EMAIL=" + author.Email}
	out, err = s.run(ctx, c, runOpts{repo: r, env: env, stdin: strings.NewReader(message)})
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(out))
	if !isOID(commit) {
		return "", fmt.Errorf("gitsvc: commit-tree: unexpected output %q", out)
	}
	if _, err := s.run(ctx, newCommand("update-ref", "--end-of-options").val(ref).val(commit), runOpts{repo: r}); err != nil {
		return "", err
	}
	return commit, nil
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
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.run(ctx, newCommand("pack-objects", "--stdout", "--quiet"), runOpts{repo: from, stdin: bytes.NewReader(list), stdout: pw})
		pw.CloseWithError(err)
		done <- err
	}()
	_, err = s.run(ctx, newCommand("index-pack", "--stdin"), runOpts{repo: into, stdin: pr})
	pr.CloseWithError(io.ErrClosedPipe)
	if err = errors.Join(<-done, err); err != nil {
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

// FastForwardWorkTree moves r's branch from old to newCommit together with
// its index and work tree (`read-tree -m -u`, which refuses to overwrite
// anything that is not old's), under r's write lock, as the folder's
// owner. r must have newCommit's objects (CopyCommit).
func (s *Service) FastForwardWorkTree(ctx context.Context, r *Repo, branch, old, newCommit string) error {
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
