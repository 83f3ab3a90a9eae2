package editsession

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"atelier/auth"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
	"atelier/workspace"
)

// Change statuses.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// File is a file as the session sees it.
type File struct {
	Path    string
	Content []byte
	ETag    string
}

// ETag is the version of content: two tabs agree on it exactly when they
// hold the same bytes.
func ETag(content []byte) string {
	sum := sha256.Sum256(content)
	return `"` + hex.EncodeToString(sum[:20]) + `"`
}

// Precondition is what the client believes about the file it writes:
// IfMatch is the ETag it loaded ("*": any existing file), IfNoneMatch "*"
// says the file must not exist yet. Both empty: write unconditionally.
type Precondition struct {
	IfMatch     string
	IfNoneMatch string
}

// check refuses a write whose precondition no longer holds; current is ""
// for a file that does not exist.
func (p Precondition) check(current string) error {
	switch {
	case p.IfMatch == "*" && current == "",
		p.IfMatch != "" && p.IfMatch != "*" && p.IfMatch != current,
		p.IfNoneMatch == "*" && current != "":
		return ErrStale
	}
	return nil
}

// Read returns the file through the read chain: the session's edits, then
// the base tree (object store, then git).
func (s *Sessions) Read(ctx context.Context, sess *Session, path string) (*File, error) {
	if err := workspace.CheckRelPath(path); err != nil {
		return nil, err
	}
	content, err := s.contentOf(ctx, s.db, sess, path)
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(content, 0) >= 0 {
		return nil, ErrBinary
	}
	return &File{Path: path, Content: content, ETag: ETag(content)}, nil
}

// contentOf is the bytes of the file at path as the session sees them,
// within the size an edit may have.
func (s *Sessions) contentOf(ctx context.Context, db *models.Store, sess *Session, path string) ([]byte, error) {
	content, exists, err := s.current(ctx, db, sess, path)
	if err != nil {
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

// current is the file as the session sees it: its edit, else the base.
func (s *Sessions) current(ctx context.Context, db *models.Store, sess *Session, path string) ([]byte, bool, error) {
	edit, err := db.SessionFile(ctx, sess.ID, path)
	switch {
	case err == nil && edit.Deleted:
		return nil, false, nil
	case err == nil:
		return edit.Content, true, nil
	case !errors.Is(err, models.ErrNotFound):
		return nil, false, err
	}
	return baseFile(ctx, s.code, sess.Source, path)
}

// baseFile reads path at the base commit; a file over the limit is read
// only far enough to know it is.
func baseFile(ctx context.Context, code *codestore.Store, src codestore.Source, path string) ([]byte, bool, error) {
	data, _, err := code.Read(ctx, src, path, MaxFileBytes+1)
	if errors.Is(err, codestore.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// inBase reports whether path is a file of the base, from the listing of
// its folder (one cached tree object), without reading the file: the tree
// and the changes list ask this for every changed path.
func (s *Sessions) inBase(ctx context.Context, sess *Session, path string) (bool, error) {
	dir, name := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, name = path[:i], path[i+1:]
	}
	es, err := s.code.List(ctx, sess.Source, dir)
	if errors.Is(err, codestore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.Name == name {
			return e.Kind != codestore.KindDir && e.Kind != codestore.KindSubmodule, nil
		}
	}
	return false, nil
}

// Save stores content as the file at path of the caller's session id,
// byte for byte; content equal to the base forgets the edit. acc must hold
// code.read; writing needs code.edit. A save is the editor's hot path, so
// it reads each row once. The base file is read first, with no
// transaction open: the object store or git may be slow, and nothing slow
// may hold a connection of the pool and the session's row meanwhile. Then
// one short transaction touches the session's row (which locks it) only if
// the session is the caller's, open and within its limits, reads the
// file's row with the count of changed paths, checks the precondition
// against the edit or the base read before (a session's base never
// changes) and the limits there, and writes. It returns the session once
// the caller may write in it, even when the write is refused, so the
// answer still carries its deadlines, and the new ETag.
func (s *Sessions) Save(ctx context.Context, acc *projects.Access, id, path string, content []byte, cond Precondition) (*Session, string, error) {
	if acc.Project.Archived() {
		return s.saveChecked(ctx, acc, id, path, content, cond) // which refuses: the session is paused
	}
	repo, base, ok, err := s.knownBase(ctx, acc, id)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return s.saveChecked(ctx, acc, id, path, content, cond)
	}
	var d *draft
	if acc.Can(auth.CodeEdit) {
		if d, err = s.draft(ctx, codestore.Source{Repo: repo, Commit: base}, path, content); err != nil {
			// The long way tells an ended session from a failing store.
			return s.saveChecked(ctx, acc, id, path, content, cond)
		}
	}
	now := s.now()
	var (
		sess    *Session
		refused error
	)
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		cs, err := tx.TouchLiveSession(ctx, id, acc.User.ID, acc.Project.ID, now, now.Add(-s.cfg.Idle), now.Add(-s.cfg.MaxAge))
		if errors.Is(err, models.ErrNotFound) {
			return errNotLive
		}
		if err != nil {
			return err
		}
		if d == nil {
			refused = auth.ErrForbidden
			return nil // the request still counts as activity
		}
		sess = s.sessionIn(cs, acc.Project, repo)
		refused, err = s.write(ctx, tx, sess, d, cond)
		return err
	})
	if errors.Is(err, errNotLive) {
		return s.saveChecked(ctx, acc, id, path, content, cond)
	}
	if err != nil {
		return nil, "", err
	}
	if refused != nil {
		return sess, "", refused
	}
	return sess, ETag(content), nil
}

// cachedBases is how many sessions' bases Sessions remembers.
const cachedBases = 4096

// sessionBase is what a session's row says of it for its whole life: whose
// it is, in which project, and its base commit.
type sessionBase struct {
	userID, projectID int64
	commit            string
}

// knownBase is the fork and the base commit of session id, when it is the
// caller's (ok false otherwise, or when it is gone). Sessions remembers
// them whenever it loads a session, so a save needs no statement of its
// own to learn them.
func (s *Sessions) knownBase(ctx context.Context, acc *projects.Access, id string) (*gitsvc.Repo, string, bool, error) {
	b, ok := s.bases.Get(id)
	if !ok {
		cs, err := s.db.SessionByID(ctx, id)
		if errors.Is(err, models.ErrNotFound) {
			return nil, "", false, nil
		}
		if err != nil {
			return nil, "", false, err
		}
		b = sessionBase{userID: cs.UserID, projectID: cs.ProjectID, commit: cs.BaseCommit}
		s.bases.Add(id, b)
	}
	if b.userID != acc.User.ID || b.projectID != acc.Project.ID {
		return nil, "", false, nil
	}
	repo, err := s.git.OpenBare(forkName(id))
	if err != nil {
		return nil, "", false, nil // an ended session's fork is gone: the long way says so
	}
	return repo, b.commit, true, nil
}

// errNotLive sends a save down the path that finds out why the session is
// not the caller's open one, and ends it when it is over a limit.
var errNotLive = errors.New("editsession: not a live session of the caller")

// saveChecked is Save the long way: Get says whether the session is the
// caller's and open (ending it when it is over a limit), then the base is
// read and the write runs under the row lock.
func (s *Sessions) saveChecked(ctx context.Context, acc *projects.Access, id, path string, content []byte, cond Precondition) (*Session, string, error) {
	sess, err := s.Get(ctx, acc, id, true)
	if err != nil {
		return nil, "", err
	}
	if !acc.Can(auth.CodeEdit) {
		return nil, "", auth.ErrForbidden
	}
	if err := editable(sess); err != nil {
		return sess, "", err
	}
	d, err := s.draft(ctx, sess.Source, path, content)
	if err != nil {
		return sess, "", err
	}
	var refused error
	err = s.change(ctx, sess, func(tx *models.Store) error {
		var err error
		refused, err = s.write(ctx, tx, sess, d, cond)
		return err
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return sess, "", err
	}
	return sess, ETag(content), nil
}

// draft is a write as far as it can go before the session's row is
// locked: the content checked, the base file read.
type draft struct {
	path    string
	content []byte
	refused error // why the content is never written; nothing else was read

	base       []byte
	baseExists bool
}

// draft checks content and reads the file at path of the base src, which
// write compares it with.
func (s *Sessions) draft(ctx context.Context, src codestore.Source, path string, content []byte) (*draft, error) {
	d := &draft{path: path, content: content}
	// In the order the answers always came: size, path, text.
	if len(content) > MaxFileBytes {
		d.refused = ErrTooLarge
		return d, nil
	}
	// A name CheckNewPath refuses is read-only, even where it exists: it
	// can be read, deleted or renamed to one it accepts, never written.
	if d.refused = workspace.CheckNewPath(path); d.refused != nil {
		return d, nil
	}
	if bytes.IndexByte(content, 0) >= 0 {
		d.refused = ErrBinary
		return d, nil
	}
	var err error
	d.base, d.baseExists, err = baseFile(ctx, s.code, src, path)
	return d, err
}

// write stores d as its path, with the session's row locked in tx, when
// cond holds and the session has room. refused is the reason a write is
// turned down (nothing written); err is a failure. It reads and writes
// rows only.
func (s *Sessions) write(ctx context.Context, tx *models.Store, sess *Session, d *draft, cond Precondition) (refused, err error) {
	if d.refused != nil {
		return d.refused, nil
	}
	edit, changed, err := tx.SessionFileAndCount(ctx, sess.ID, d.path)
	if err != nil {
		return nil, err
	}
	cur, exists := d.base, d.baseExists
	if edit != nil {
		cur, exists = edit.Content, !edit.Deleted
	}
	if err := cond.check(etagIf(cur, exists)); err != nil {
		return err, nil
	}
	if d.baseExists && bytes.Equal(d.content, d.base) {
		return nil, tx.DeleteSessionFile(ctx, sess.ID, d.path)
	}
	if edit == nil && changed >= MaxPaths {
		return ErrTooManyPaths, nil
	}
	return nil, tx.PutSessionFile(ctx, &models.SessionFile{SessionID: sess.ID, Path: d.path, Content: nonNil(d.content), UpdatedAt: s.now()})
}

// Delete removes the file from the session's tree.
func (s *Sessions) Delete(ctx context.Context, sess *Session, path string, cond Precondition) error {
	if err := workspace.CheckRelPath(path); err != nil {
		return err
	}
	base, baseExists, err := baseFile(ctx, s.code, sess.Source, path)
	if err != nil {
		return err
	}
	return s.change(ctx, sess, func(tx *models.Store) error {
		edit, changed, err := tx.SessionFileAndCount(ctx, sess.ID, path)
		if err != nil {
			return err
		}
		cur, exists := base, baseExists
		if edit != nil {
			cur, exists = edit.Content, !edit.Deleted
		}
		if !exists {
			return ErrFileNotFound
		}
		if err := cond.check(ETag(cur)); err != nil {
			return err
		}
		if !baseExists {
			return tx.DeleteSessionFile(ctx, sess.ID, path) // an added file: forget it
		}
		if edit == nil && changed >= MaxPaths {
			return ErrTooManyPaths
		}
		return tx.PutSessionFile(ctx, &models.SessionFile{SessionID: sess.ID, Path: path, Deleted: true, UpdatedAt: s.now()})
	})
}

// change runs a person's change of the session's files under inSession;
// a paused session takes none (editable).
func (s *Sessions) change(ctx context.Context, sess *Session, fn func(tx *models.Store) error) error {
	if err := editable(sess); err != nil {
		return err
	}
	return inSession(ctx, s.db, sess, fn)
}

// inSession runs fn with the session's row locked after checking again, from
// the database, that it is still open and the caller's: every write of a
// session is serialised and none lands in an ended one.
func inSession(ctx context.Context, db *models.Store, sess *Session, fn func(tx *models.Store) error) error {
	return db.Tx(ctx, func(tx *models.Store) error {
		cs, err := tx.LockSession(ctx, sess.ID)
		if err != nil {
			return err
		}
		if cs.UserID != sess.UserID {
			return ErrNotFound
		}
		if cs.State != models.SessionOpen {
			return &GoneError{Reason: *cs.CloseReason}
		}
		return fn(tx)
	})
}

func etagIf(content []byte, exists bool) string {
	if !exists {
		return ""
	}
	return ETag(content)
}

// nonNil keeps an empty file distinct from a deletion (NULL) in the table.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Change is one changed path.
type Change struct {
	Path   string `json:"path"`
	Status string `json:"status"`
}

// Changes lists every changed path with how it changed.
func (s *Sessions) Changes(ctx context.Context, sess *Session) ([]Change, error) {
	// Paths only: the tree asks this for every folder it shows, and the
	// contents could be the path limit times the file limit.
	edits, err := s.db.SessionPaths(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(edits))
	for _, e := range edits {
		c := Change{Path: e.Path, Status: Modified}
		if e.Deleted {
			c.Status = Deleted
		} else if exists, err := s.inBase(ctx, sess, e.Path); err != nil {
			return nil, err
		} else if !exists {
			c.Status = Added
		}
		out = append(out, c)
	}
	return out, nil
}

// Diff is the unified diff of the file at path against the base.
func (s *Sessions) Diff(ctx context.Context, sess *Session, path string) (string, error) {
	if err := workspace.CheckRelPath(path); err != nil {
		return "", err
	}
	edit, err := s.db.SessionFile(ctx, sess.ID, path)
	if errors.Is(err, models.ErrNotFound) {
		return "", nil // unchanged
	}
	if err != nil {
		return "", err
	}
	base, baseExists, err := baseFile(ctx, s.code, sess.Source, path)
	if err != nil {
		return "", err
	}
	from, to := "a/"+path, "b/"+path
	if !baseExists {
		from = "/dev/null"
	}
	if edit.Deleted {
		to = "/dev/null"
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: splitLines(base), B: splitLines(edit.Content), FromFile: from, ToFile: to, Context: 3,
	})
}

// splitLines keeps each line's own ending, so a CRLF file or a missing final
// newline shows in the diff as it is.
func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] += "\n\\ No newline at end of file\n"
	}
	return lines
}

// Entry is one item of a folder in the session's tree.
type Entry struct {
	codestore.Entry
	Status string `json:"status,omitempty"` // added | modified | deleted, or "" (a folder: changed inside)
	Inside bool   `json:"changedInside,omitempty"`
}

// List is one level of dir in the session's tree: the base listing with the
// session's changes marked, added files and folders included.
func (s *Sessions) List(ctx context.Context, sess *Session, dir string) ([]Entry, error) {
	if err := workspace.CheckRelDir(dir); err != nil {
		return nil, err
	}
	base, err := s.code.List(ctx, sess.Source, dir)
	baseMissing := errors.Is(err, codestore.ErrNotFound)
	if err != nil && !baseMissing {
		return nil, err
	}
	changes, err := s.Changes(ctx, sess)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Entry{}
	var out []*Entry
	for _, b := range base {
		e := &Entry{Entry: b}
		byName[b.Name] = e
		out = append(out, e)
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	for _, c := range changes {
		rest, ok := strings.CutPrefix(c.Path, prefix)
		if !ok {
			continue
		}
		name, _, nested := strings.Cut(rest, "/")
		e, seen := byName[name]
		if !seen {
			kind := codestore.KindFile
			if nested {
				kind = codestore.KindDir
			}
			e = &Entry{Entry: codestore.Entry{Name: name, Kind: kind}}
			byName[name] = e
			out = append(out, e)
		}
		if nested {
			e.Inside = true
		} else {
			e.Status = c.Status
		}
	}
	if baseMissing && len(out) == 0 {
		return nil, ErrFileNotFound
	}
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].Kind == codestore.KindDir) != (out[j].Kind == codestore.KindDir) {
			return out[i].Kind == codestore.KindDir
		}
		return out[i].Name < out[j].Name
	})
	list := make([]Entry, len(out))
	for i, e := range out {
		list[i] = *e
	}
	return list, nil
}
