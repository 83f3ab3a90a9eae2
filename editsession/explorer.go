package editsession

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/workspace"
)

// The explorer's operations on the session's tree: new files, checked
// folder names, renames and deletions of files and folders, and reverts.
// Each runs in one transaction on the session's edits, so a rename is never
// half done: the old paths become deletions and the new ones additions of
// the same bytes, or nothing changes.

// MaxMoveFiles bounds a folder rename or deletion: every file of the folder
// becomes one or two edits, all in one transaction.
const MaxMoveFiles = 100

var (
	ErrExists      = fault.New(fault.Conflict, "exists", "editsession: a file or folder of that name exists", "A file or folder of that name already exists.")
	ErrNotAFolder  = fault.New(fault.Conflict, "not_a_folder", "editsession: the path goes through a file", "The path goes through a file, which cannot hold other files.")
	ErrSamePath    = fault.New(fault.BadInput, "same_path", "editsession: the new path is the old one", "The new name is the old one.")
	ErrIntoItself  = fault.New(fault.BadInput, "into_itself", "editsession: a folder cannot move into itself", "A folder cannot move into itself.")
	ErrTooManyMove = fault.New(fault.TooLarge, "too_many_files", fmt.Sprintf("editsession: a folder of more than %d files is not renamed or deleted at once", MaxMoveFiles),
		fmt.Sprintf("A folder of more than %d files cannot be renamed or deleted at once.", MaxMoveFiles))
	// ErrNotMovable: a session keeps each file's bytes, never its mode, so
	// a moved executable would lose its executable bit and a moved link or
	// submodule would become something else. Refused rather than changed.
	ErrNotMovable = fault.New(fault.Conflict, "not_movable", "editsession: executables, links and submodules keep their place",
		"A session keeps file contents, not modes, so executables, links and submodules cannot be renamed here.")
	ErrNotChanged = fault.New(fault.NotFound, "not_changed", "editsession: the path has no change to revert", "That path has no change to revert.")
)

// Move is one file a rename moved.
type Move struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// CheckNewPath is workspace.CheckRelPath for a name a person gives to
// something new: it also refuses control characters, which git would store
// but which no terminal, diff or tree shows faithfully. Names that already
// exist in the base keep working as they are.
func CheckNewPath(p string) error {
	if err := workspace.CheckRelPath(p); err != nil {
		return err
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fault.Detailf(workspace.ErrBadPath, " %.120q: the name has a control character", p)
		}
	}
	return nil
}

// CheckNewFolder says whether a folder may be made at dir: a good name, not
// taken, not under a file. Nothing is stored: git keeps no empty folders,
// so the folder exists once a file is added to it.
func (s *Sessions) CheckNewFolder(ctx context.Context, sess *Session, dir string) error {
	if err := CheckNewPath(dir); err != nil {
		return err
	}
	return inSession(ctx, s.db, sess, func(tx *models.Store) error {
		t, err := s.treeOf(ctx, tx, sess)
		if err != nil {
			return err
		}
		return t.free(ctx, dir)
	})
}

// Create adds an empty file at path, refusing a taken path. It returns the
// new file's ETag.
func (s *Sessions) Create(ctx context.Context, sess *Session, path string) (string, error) {
	if err := CheckNewPath(path); err != nil {
		return "", err
	}
	err := inSession(ctx, s.db, sess, func(tx *models.Store) error {
		t, err := s.treeOf(ctx, tx, sess)
		if err != nil {
			return err
		}
		if err := t.free(ctx, path); err != nil {
			return err
		}
		if err := s.put(ctx, tx, sess, path, []byte{}); err != nil {
			return err
		}
		return withinPathLimit(ctx, tx, sess)
	})
	if err != nil {
		return "", err
	}
	return ETag(nil), nil
}

// Rename moves the file or folder at from to to, with every file's exact
// bytes. It returns the files it moved.
func (s *Sessions) Rename(ctx context.Context, sess *Session, from, to string) ([]Move, error) {
	if err := workspace.CheckRelPath(from); err != nil {
		return nil, err
	}
	if err := CheckNewPath(to); err != nil {
		return nil, err
	}
	switch {
	case from == to:
		return nil, ErrSamePath
	case strings.HasPrefix(to, from+"/"):
		return nil, ErrIntoItself
	}
	var moves []Move
	err := inSession(ctx, s.db, sess, func(tx *models.Store) error {
		t, err := s.treeOf(ctx, tx, sess)
		if err != nil {
			return err
		}
		files, err := t.filesAt(ctx, from)
		if err != nil {
			return err
		}
		if err := t.free(ctx, to); err != nil {
			return err
		}
		for _, f := range files {
			if f.kind != movable {
				return ErrNotMovable
			}
		}
		for _, f := range files {
			content, err := s.contentOf(ctx, tx, sess, f.path)
			if err != nil {
				return err
			}
			dest := to + strings.TrimPrefix(f.path, from)
			if err := workspace.CheckRelPath(dest); err != nil {
				return err // longer than a path may be
			}
			if err := s.remove(ctx, tx, sess, f); err != nil {
				return err
			}
			if err := s.put(ctx, tx, sess, dest, content); err != nil {
				return err
			}
			moves = append(moves, Move{From: f.path, To: dest})
		}
		return withinPathLimit(ctx, tx, sess)
	})
	if err != nil {
		return nil, err
	}
	return moves, nil
}

// DeleteFolder deletes every file of the folder dir, and returns their
// paths. Deleted base files stay listed as deletions until Submit.
func (s *Sessions) DeleteFolder(ctx context.Context, sess *Session, dir string) ([]string, error) {
	if err := workspace.CheckRelPath(dir); err != nil {
		return nil, err
	}
	var deleted []string
	err := inSession(ctx, s.db, sess, func(tx *models.Store) error {
		t, err := s.treeOf(ctx, tx, sess)
		if err != nil {
			return err
		}
		if k, err := t.kindOf(ctx, dir); err != nil {
			return err
		} else if k != kindFolder {
			return ErrFileNotFound
		}
		files, err := t.filesAt(ctx, dir)
		if err != nil {
			return err
		}
		for _, f := range files {
			if f.kind == submodule {
				return ErrNotMovable
			}
		}
		for _, f := range files {
			if err := s.remove(ctx, tx, sess, f); err != nil {
				return err
			}
			deleted = append(deleted, f.path)
		}
		return withinPathLimit(ctx, tx, sess)
	})
	if err != nil {
		return nil, err
	}
	return deleted, nil
}

// Revert forgets the session's change of path: a deleted file comes back,
// a modified one reads as the base again, an added one is gone.
func (s *Sessions) Revert(ctx context.Context, sess *Session, path string) error {
	if err := workspace.CheckRelPath(path); err != nil {
		return err
	}
	return inSession(ctx, s.db, sess, func(tx *models.Store) error {
		if _, err := tx.SessionFile(ctx, sess.ID, path); errors.Is(err, models.ErrNotFound) {
			return ErrNotChanged
		} else if err != nil {
			return err
		}
		t, err := s.treeOf(ctx, tx, sess)
		if err != nil {
			return err
		}
		// A file restored under what is now a file would make a tree git
		// cannot hold.
		if err := t.noFileAbove(ctx, path); err != nil {
			return err
		}
		return tx.DeleteSessionFile(ctx, sess.ID, path)
	})
}

// withinPathLimit fails the transaction when it left the session with more
// changed paths than it may have.
func withinPathLimit(ctx context.Context, tx *models.Store, sess *Session) error {
	_, changed, err := tx.SessionFileAndCount(ctx, sess.ID, "")
	if err != nil {
		return err
	}
	if changed > MaxPaths {
		return ErrTooManyPaths
	}
	return nil
}

// put stores content at path as write does, without its preconditions:
// content equal to the base forgets the edit.
func (s *Sessions) put(ctx context.Context, tx *models.Store, sess *Session, path string, content []byte) error {
	base, baseExists, err := baseFile(ctx, s.code, sess, path)
	if err != nil {
		return err
	}
	if baseExists && bytes.Equal(content, base) {
		return tx.DeleteSessionFile(ctx, sess.ID, path)
	}
	return tx.PutSessionFile(ctx, &models.SessionFile{SessionID: sess.ID, Path: path, Content: nonNil(content), UpdatedAt: s.now()})
}

// remove takes f out of the session's tree: a base file becomes a deletion,
// an added one is forgotten.
func (s *Sessions) remove(ctx context.Context, tx *models.Store, sess *Session, f treeFile) error {
	if !f.inBase {
		return tx.DeleteSessionFile(ctx, sess.ID, f.path)
	}
	return tx.PutSessionFile(ctx, &models.SessionFile{SessionID: sess.ID, Path: f.path, Deleted: true, UpdatedAt: s.now()})
}

// Kinds of paths in the session's tree.
type pathKind int

const (
	kindNone pathKind = iota
	kindFile
	kindFolder
	kindOther // a link or a submodule of the base
)

// Kinds of files a move meets.
type fileKind int

const (
	movable   fileKind = iota // a regular, non-executable file
	fixedMode                 // an executable or a link: a session cannot keep its mode
	submodule
)

// treeFile is one file of the session's tree.
type treeFile struct {
	path   string
	inBase bool // a base file: moving or deleting it leaves a deletion
	kind   fileKind
}

// sessionTree is the session's tree as one operation sees it: the base at
// the session's commit (read from git, which knows modes) with the
// session's edits, read once inside the operation's transaction.
type sessionTree struct {
	s     *Sessions
	sess  *Session
	edits map[string]bool // changed path → deleted
	paths []models.SessionPath
}

func (s *Sessions) treeOf(ctx context.Context, tx *models.Store, sess *Session) (*sessionTree, error) {
	ps, err := tx.SessionPaths(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	t := &sessionTree{s: s, sess: sess, edits: make(map[string]bool, len(ps)), paths: ps}
	for _, p := range ps {
		t.edits[p.Path] = p.Deleted
	}
	return t, nil
}

// baseEntry is path's entry in the base, or ok false.
func (t *sessionTree) baseEntry(ctx context.Context, path string) (gitsvc.Entry, bool, error) {
	dir, name := splitPath(path)
	es, err := t.s.git.List(ctx, t.sess.Source.Repo, t.sess.Source.Commit, dir)
	if errors.Is(err, gitsvc.ErrNotFound) {
		return gitsvc.Entry{}, false, nil
	}
	if err != nil {
		return gitsvc.Entry{}, false, err
	}
	for _, e := range es {
		if e.Path == name {
			return e, true, nil
		}
	}
	return gitsvc.Entry{}, false, nil
}

// kindOf is what path is in the session's tree. A base folder whose files
// are all deleted is still a folder: the tree lists them, struck through.
func (t *sessionTree) kindOf(ctx context.Context, path string) (pathKind, error) {
	deleted, edited := t.edits[path]
	if edited && !deleted {
		return kindFile, nil
	}
	for _, p := range t.paths {
		if !p.Deleted && strings.HasPrefix(p.Path, path+"/") {
			return kindFolder, nil
		}
	}
	if edited {
		return kindNone, nil // a deleted base file
	}
	e, ok, err := t.baseEntry(ctx, path)
	switch {
	case err != nil:
		return kindNone, err
	case !ok:
		return kindNone, nil
	case e.Type == "tree":
		return kindFolder, nil
	case e.Type == "blob" && e.Mode != "120000":
		return kindFile, nil
	}
	return kindOther, nil
}

// free refuses a path that is taken or lies under a file.
func (t *sessionTree) free(ctx context.Context, path string) error {
	k, err := t.kindOf(ctx, path)
	if err != nil {
		return err
	}
	if k != kindNone {
		return ErrExists
	}
	return t.noFileAbove(ctx, path)
}

// noFileAbove refuses a path under something that is not a folder.
func (t *sessionTree) noFileAbove(ctx context.Context, path string) error {
	for dir, _ := splitPath(path); dir != ""; dir, _ = splitPath(dir) {
		k, err := t.kindOf(ctx, dir)
		if err != nil {
			return err
		}
		if k == kindFile || k == kindOther {
			return ErrNotAFolder
		}
	}
	return nil
}

// filesAt lists the file at path, or every file of the folder at path, at
// most MaxMoveFiles of them.
func (t *sessionTree) filesAt(ctx context.Context, path string) ([]treeFile, error) {
	k, err := t.kindOf(ctx, path)
	if err != nil {
		return nil, err
	}
	switch k {
	case kindNone:
		return nil, ErrFileNotFound
	case kindFile, kindOther:
		e, inBase, err := t.baseEntry(ctx, path)
		if err != nil {
			return nil, err
		}
		if !inBase {
			return []treeFile{{path: path}}, nil
		}
		// An edit keeps the base's mode at the base's path only.
		return []treeFile{{path: path, inBase: true, kind: kindOfMode(e.Mode)}}, nil
	}
	var files []treeFile
	seen := map[string]bool{}
	if err := t.walkBase(ctx, path, &files, seen); err != nil {
		return nil, err
	}
	for _, p := range t.paths {
		if !p.Deleted && strings.HasPrefix(p.Path, path+"/") && !seen[p.Path] {
			files = append(files, treeFile{path: p.Path})
			if len(files) > MaxMoveFiles {
				return nil, ErrTooManyMove
			}
		}
	}
	return files, nil
}

// walkBase adds the base files under dir that the session has not deleted.
func (t *sessionTree) walkBase(ctx context.Context, dir string, files *[]treeFile, seen map[string]bool) error {
	es, err := t.s.git.List(ctx, t.sess.Source.Repo, t.sess.Source.Commit, dir)
	if errors.Is(err, gitsvc.ErrNotFound) {
		return nil // a folder only the session's edits make
	}
	if err != nil {
		return err
	}
	for _, e := range es {
		p := dir + "/" + e.Path
		if e.Type == "tree" {
			if err := t.walkBase(ctx, p, files, seen); err != nil {
				return err
			}
			continue
		}
		seen[p] = true
		if t.edits[p] {
			continue // deleted
		}
		*files = append(*files, treeFile{path: p, inBase: true, kind: kindOfMode(e.Mode)})
		if len(*files) > MaxMoveFiles {
			return ErrTooManyMove
		}
	}
	return nil
}

func kindOfMode(mode string) fileKind {
	switch mode {
	case "100644":
		return movable
	case "160000":
		return submodule
	}
	return fixedMode
}

// splitPath is path's folder ("" for the root) and name.
func splitPath(path string) (string, string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}
