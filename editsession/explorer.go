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
// the same bytes, or nothing changes. The base is read outside it
// (baseReads): the transaction holds SQL only.

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

// CheckNewFolder says whether a folder may be made at dir: a good name, not
// taken, not under a file. Nothing is stored: git keeps no empty folders,
// so the folder exists once a file is added to it.
func (s *Sessions) CheckNewFolder(ctx context.Context, sess *Session, dir string) error {
	if err := workspace.CheckNewPath(dir); err != nil {
		return err
	}
	return s.changeTree(ctx, sess, func(tx *models.Store, b *baseReads) error {
		t, err := treeOf(ctx, tx, b)
		if err != nil {
			return err
		}
		return t.free(dir)
	})
}

// Create adds an empty file at path, refusing a taken path. It returns the
// new file's ETag.
func (s *Sessions) Create(ctx context.Context, sess *Session, path string) (string, error) {
	if err := workspace.CheckNewPath(path); err != nil {
		return "", err
	}
	err := s.changeTree(ctx, sess, func(tx *models.Store, b *baseReads) error {
		t, err := treeOf(ctx, tx, b)
		if err != nil {
			return err
		}
		if err := t.free(path); err != nil {
			return err
		}
		if err := s.put(ctx, tx, b, path, []byte{}); err != nil {
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
	if err := workspace.CheckNewPath(to); err != nil {
		return nil, err
	}
	switch {
	case from == to:
		return nil, ErrSamePath
	case strings.HasPrefix(to, from+"/"):
		return nil, ErrIntoItself
	}
	var moves []Move
	err := s.changeTree(ctx, sess, func(tx *models.Store, b *baseReads) error {
		moves = nil // a try the base sent back moved nothing
		t, err := treeOf(ctx, tx, b)
		if err != nil {
			return err
		}
		files, err := t.filesAt(from)
		if err != nil {
			return err
		}
		if err := t.free(to); err != nil {
			return err
		}
		for _, f := range files {
			if f.kind != movable {
				return ErrNotMovable
			}
		}
		// Every base file the moves compare or copy, read in one go.
		var want []string
		for _, f := range files {
			if f.inBase {
				want = append(want, f.path)
			}
			if dest := to + strings.TrimPrefix(f.path, from); workspace.CheckNewPath(dest) == nil {
				want = append(want, dest)
			}
		}
		if err := b.want(want...); err != nil {
			return err
		}
		for _, f := range files {
			content, err := t.content(ctx, tx, f.path)
			if err != nil {
				return err
			}
			dest := to + strings.TrimPrefix(f.path, from)
			if err := workspace.CheckNewPath(dest); err != nil {
				return err // longer than a path may be, or a name never written
			}
			if err := s.remove(ctx, tx, sess, f); err != nil {
				return err
			}
			if err := s.put(ctx, tx, b, dest, content); err != nil {
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
	err := s.changeTree(ctx, sess, func(tx *models.Store, b *baseReads) error {
		deleted = nil // a try the base sent back deleted nothing
		t, err := treeOf(ctx, tx, b)
		if err != nil {
			return err
		}
		if k, err := t.kindOf(dir); err != nil {
			return err
		} else if k != kindFolder {
			return ErrFileNotFound
		}
		files, err := t.filesAt(dir)
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
	return s.changeTree(ctx, sess, func(tx *models.Store, b *baseReads) error {
		if _, err := tx.SessionFile(ctx, sess.ID, path); errors.Is(err, models.ErrNotFound) {
			return ErrNotChanged
		} else if err != nil {
			return err
		}
		t, err := treeOf(ctx, tx, b)
		if err != nil {
			return err
		}
		// A file restored under what is now a file would make a tree git
		// cannot hold.
		if err := t.noFileAbove(path); err != nil {
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
func (s *Sessions) put(ctx context.Context, tx *models.Store, b *baseReads, path string, content []byte) error {
	base, baseExists, err := b.file(path)
	if err != nil {
		return err
	}
	if baseExists && bytes.Equal(content, base) {
		return tx.DeleteSessionFile(ctx, b.sess.ID, path)
	}
	return tx.PutSessionFile(ctx, &models.SessionFile{SessionID: b.sess.ID, Path: path, Content: nonNil(content), UpdatedAt: s.now()})
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
	base  *baseReads
	edits map[string]bool // changed path → deleted
	paths []models.SessionPath
}

func treeOf(ctx context.Context, tx *models.Store, b *baseReads) (*sessionTree, error) {
	ps, err := tx.SessionPaths(ctx, b.sess.ID)
	if err != nil {
		return nil, err
	}
	t := &sessionTree{base: b, edits: make(map[string]bool, len(ps)), paths: ps}
	for _, p := range ps {
		t.edits[p.Path] = p.Deleted
	}
	return t, nil
}

// content is the file at path as the session sees it, within the size an
// edit may have: its edit in tx, else the base.
func (t *sessionTree) content(ctx context.Context, tx *models.Store, path string) ([]byte, error) {
	var (
		content []byte
		exists  bool
	)
	edit, err := tx.SessionFile(ctx, t.base.sess.ID, path)
	switch {
	case err == nil:
		content, exists = edit.Content, !edit.Deleted
	case errors.Is(err, models.ErrNotFound):
		if content, exists, err = t.base.file(path); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	if !exists {
		return nil, ErrFileNotFound
	}
	if len(content) > MaxFileBytes {
		return nil, ErrTooLarge
	}
	return content, nil
}

// baseEntry is path's entry in the base, or ok false.
func (t *sessionTree) baseEntry(path string) (gitsvc.Entry, bool, error) {
	dir, name := splitPath(path)
	es, err := t.base.list(dir)
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
func (t *sessionTree) kindOf(path string) (pathKind, error) {
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
	e, ok, err := t.baseEntry(path)
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
func (t *sessionTree) free(path string) error {
	k, err := t.kindOf(path)
	if errors.Is(err, errBaseMiss) {
		// The folders above are asked for in the same try.
		if above := t.noFileAbove(path); above != nil && !errors.Is(above, ErrNotAFolder) {
			return above
		}
		return err
	}
	if err != nil {
		return err
	}
	if k != kindNone {
		return ErrExists
	}
	return t.noFileAbove(path)
}

// noFileAbove refuses a path under something that is not a folder.
func (t *sessionTree) noFileAbove(path string) error {
	var missed error
	for dir, _ := splitPath(path); dir != ""; dir, _ = splitPath(dir) {
		k, err := t.kindOf(dir)
		if errors.Is(err, errBaseMiss) {
			missed = err // every level is asked for in one try
			continue
		}
		if err != nil {
			return err
		}
		if k == kindFile || k == kindOther {
			return ErrNotAFolder
		}
	}
	return missed
}

// filesAt lists the file at path, or every file of the folder at path, at
// most MaxMoveFiles of them.
func (t *sessionTree) filesAt(path string) ([]treeFile, error) {
	k, err := t.kindOf(path)
	if err != nil {
		return nil, err
	}
	switch k {
	case kindNone:
		return nil, ErrFileNotFound
	case kindFile, kindOther:
		e, inBase, err := t.baseEntry(path)
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
	if err := t.walkBase(path, &files, seen); err != nil {
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
func (t *sessionTree) walkBase(dir string, files *[]treeFile, seen map[string]bool) error {
	es, err := t.base.list(dir) // none for a folder only the session's edits make
	if err != nil {
		return err
	}
	var missed error
	for _, e := range es {
		p := dir + "/" + e.Path
		if e.Type == "tree" {
			// Past a folder not read yet, so one try asks for all of a level.
			if err := t.walkBase(p, files, seen); errors.Is(err, errBaseMiss) {
				missed = err
			} else if err != nil {
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
	return missed
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

// baseReads is what one explorer operation read of the session's base.
// The base never changes, so what was read stays true: the operation runs
// in its transaction with these reads alone, and when it needs some it
// does not have, the transaction ends (errBaseMiss), they are read outside
// any transaction, and the operation runs again. Each try reads at least
// one thing more: a folder's files all at once, a tree one level deeper.
type baseReads struct {
	s     *Sessions
	sess  *Session
	lists map[string][]gitsvc.Entry // folder → entries; nil for a folder the base lacks
	files map[string]baseContent

	missLists map[string]bool // what a try was missing
	missFiles map[string]bool
}

type baseContent struct {
	data   []byte
	exists bool
}

// errBaseMiss ends a try that needs reads of the base it does not have.
var errBaseMiss = errors.New("editsession: the operation needs more of the base")

// maxBaseTries bounds the tries of one operation: about one per level of
// the folder it moves or deletes, and a few more.
const maxBaseTries = 100

// list is the entries of dir in the base; none when it has no such folder.
func (b *baseReads) list(dir string) ([]gitsvc.Entry, error) {
	if es, ok := b.lists[dir]; ok {
		return es, nil
	}
	b.missLists[dir] = true
	return nil, errBaseMiss
}

// file is the file at path in the base, read as baseFile does.
func (b *baseReads) file(path string) ([]byte, bool, error) {
	if err := b.want(path); err != nil {
		return nil, false, err
	}
	f := b.files[path]
	return f.data, f.exists, nil
}

// want asks for the base files at paths, all read in one go if any is
// missing.
func (b *baseReads) want(paths ...string) error {
	for _, p := range paths {
		if _, ok := b.files[p]; !ok {
			b.missFiles[p] = true
		}
	}
	if len(b.missFiles) > 0 {
		return errBaseMiss
	}
	return nil
}

// read reads what the last try missed.
func (b *baseReads) read(ctx context.Context) error {
	for dir := range b.missLists {
		es, err := b.s.git.List(ctx, b.sess.Source.Repo, b.sess.Source.Commit, dir)
		if err != nil && !errors.Is(err, gitsvc.ErrNotFound) {
			return err
		}
		b.lists[dir] = es
	}
	for path := range b.missFiles {
		data, exists, err := baseFile(ctx, b.s.code, b.sess.Source, path)
		if err != nil {
			return err
		}
		b.files[path] = baseContent{data: data, exists: exists}
	}
	clear(b.missLists)
	clear(b.missFiles)
	return nil
}

// changeTree is change for an operation that reads the base: fn runs in
// the transaction with what the base gave so far, and again after each
// read it was missing.
func (s *Sessions) changeTree(ctx context.Context, sess *Session, fn func(tx *models.Store, b *baseReads) error) error {
	b := &baseReads{s: s, sess: sess, lists: map[string][]gitsvc.Entry{}, files: map[string]baseContent{},
		missLists: map[string]bool{}, missFiles: map[string]bool{}}
	for range maxBaseTries {
		err := s.change(ctx, sess, func(tx *models.Store) error { return fn(tx, b) })
		if !errors.Is(err, errBaseMiss) {
			return err
		}
		if err := b.read(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("editsession: %s needed more than %d reads of the base", sess.ID, maxBaseTries)
}
