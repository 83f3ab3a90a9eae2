package editsession

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/sandbox"
	"atelier/workspace"
)

// checkoutIdle is how long a checkout stays after its last command; the
// next command rebuilds it from the fork and the edits (ADR 0029).
const checkoutIdle = 2 * time.Minute

// checkout is where a session's commands run: the base tree with the
// session's edits on top, owned by the session's user.
type checkout struct {
	dir, home, tmp string // tmp is the session's /tmp
	uid, gid       uint32
	// lower, upper and work make dir an overlay when layered: the base as
	// exported (lower), and what was written or deleted since (upper), so
	// a capture reads only upper's paths (readChanged). Without an overlay
	// on this host, dir is a plain folder and a capture walks all of it.
	lower, upper, work string
	layered            bool
	// spares are sandbox helpers started ahead for the next commands
	// (sandbox.Spare), oldest first, made while generation held: they see
	// the mounts as they were then, so remove ends them and moves
	// generation on. starting counts those being started.
	spareMu    sync.Mutex
	spares     []*sandbox.Spare
	starting   int
	generation int
	// synced maps each path that differs from the base in dir to the
	// version of the edit it holds (editVersion); the next sync writes only
	// edits that changed since, so changes a shell made meanwhile are not
	// undone. The version is the content, not a time: two saves within one
	// clock tick must still both reach the checkout.
	synced   map[string]string
	lastUsed time.Time
	// seen is what the last capture read of each text file, by the file's
	// inode and times, so the next reads only what changed (statKey).
	seen map[string]seenFile
	// base is the tree of baseCommit (baseEntries), listed once: a commit
	// does not change.
	base       map[string]gitsvc.Entry
	baseCommit string
}

// checkouts tracks the live checkouts of this instance, one command at a
// time per session.
type checkouts struct {
	mu    sync.Mutex
	live  map[string]*checkout
	locks map[string]*sync.Mutex
}

func newCheckouts() *checkouts {
	return &checkouts{live: map[string]*checkout{}, locks: map[string]*sync.Mutex{}}
}

// lock serialises the commands of one session.
func (c *checkouts) lock(id string) func() {
	c.mu.Lock()
	l, ok := c.locks[id]
	if !ok {
		l = &sync.Mutex{}
		c.locks[id] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// gitBlobID is git's name for content as a blob, to compare a file with the
// base without reading the base.
func gitBlobID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// baseEntries is the base tree: path → entry, for blobs, links and
// submodules; read only, kept on the checkout while its base stays.
func (r *Runtime) baseEntries(ctx context.Context, sess *Session, co *checkout) (map[string]gitsvc.Entry, error) {
	if co.base != nil && co.baseCommit == sess.BaseCommit {
		return co.base, nil
	}
	_, all, err := r.git.ListAll(ctx, sess.Source.Repo, sess.BaseCommit)
	if err != nil {
		return nil, err
	}
	m := make(map[string]gitsvc.Entry, len(all))
	for _, e := range all {
		if e.Type != "tree" {
			m[e.Path] = e
		}
	}
	co.base, co.baseCommit = m, sess.BaseCommit
	return m, nil
}

// build makes a fresh checkout: the base exported by git into the lower
// layer, an empty upper one over it, the edits written on top, everything
// owned by the session's user, the top folder 0700.
func (r *Runtime) build(ctx context.Context, sess *Session, co *checkout) error {
	if err := co.remove(); err != nil {
		return err
	}
	if err := os.Mkdir(co.lower, 0o700); err != nil {
		return fmt.Errorf("editsession: checkout: %w", err)
	}
	if err := r.git.Export(ctx, sess.Source.Repo, sess.BaseCommit, co.lower); err != nil {
		return err
	}
	if err := chownTree(co.lower, co.uid, co.gid); err != nil {
		return err
	}
	if err := co.layer(); err != nil {
		return err
	}
	co.synced, co.seen = map[string]string{}, nil
	return r.sync(ctx, sess, co)
}

// layer mounts the overlay of an empty upper folder over the exported base
// at dir, or, where the host has no overlay, makes the export dir itself.
func (co *checkout) layer() error {
	for _, d := range []string{co.upper, co.work, co.dir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("editsession: checkout: %w", err)
		}
	}
	// The overlay's top folder is the upper one's: the session's, 0700.
	if err := os.Lchown(co.upper, int(co.uid), int(co.gid)); err != nil {
		return fmt.Errorf("editsession: checkout: %w", err)
	}
	err := sandbox.MountLayers(co.lower, co.upper, co.work, co.dir)
	if err == nil {
		co.layered = true
		return nil
	}
	if !errors.Is(err, sandbox.ErrNoLayers) {
		return err
	}
	co.layered = false
	for _, d := range []string{co.upper, co.work, co.dir} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return os.Rename(co.lower, co.dir)
}

// sparesAhead is how many helpers wait for a session's next commands: a
// helper's start-up takes longer than a short command, so commands run
// back to back would otherwise catch up with the one started for them.
// Three, since a spare starts up at a low priority (on spare CPU only) and
// then waits for the kernel to move it into its cgroups: two started for
// commands 25 ms apart were often not ready yet on a busy 2-core host.
const sparesAhead = 3

// prepareSpares starts, in the background, sandbox helpers for the
// checkout's next commands, run as uid, up to sparesAhead.
func (co *checkout) prepareSpares(box *sandbox.Sandbox, uid uint32, log *slog.Logger) {
	co.spareMu.Lock()
	generation := co.generation
	missing := max(sparesAhead-len(co.spares)-co.starting, 0)
	co.starting += missing
	co.spareMu.Unlock()
	for range missing {
		go func() {
			spare, err := box.Spare(uid)
			co.spareMu.Lock()
			co.starting--
			// Not when the checkout was removed meanwhile: it saw old mounts.
			keep := err == nil && co.generation == generation && len(co.spares) < sparesAhead
			if keep {
				co.spares = append(co.spares, spare)
			}
			co.spareMu.Unlock()
			if err != nil {
				log.Warn("no spare sandbox helper", "err", err)
			} else if !keep {
				spare.Close()
			}
		}()
	}
}

// takeSpare hands the oldest waiting helper, if any, to a command.
func (co *checkout) takeSpare() *sandbox.Spare {
	co.spareMu.Lock()
	defer co.spareMu.Unlock()
	if len(co.spares) == 0 {
		return nil
	}
	spare := co.spares[0]
	co.spares = co.spares[1:]
	return spare
}

// dropSpares ends the waiting helpers: the checkout's mounts change or go.
func (co *checkout) dropSpares() {
	co.spareMu.Lock()
	spares := co.spares
	co.spares = nil
	co.generation++
	co.spareMu.Unlock()
	for _, spare := range spares {
		spare.Close()
	}
}

// remove unmounts the checkout's overlay, a leftover of a server that
// stopped included, and removes its folders.
func (co *checkout) remove() error {
	co.dropSpares()
	if err := sandbox.UnmountLayers(co.dir); err != nil {
		return err
	}
	var errs []error
	for _, d := range []string{co.dir, co.lower, co.upper, co.work} {
		errs = append(errs, os.RemoveAll(d))
	}
	return errors.Join(errs...)
}

// sync writes into the checkout the edits saved since it last saw them
// (in the editor, say), and the base again where an edit went away.
func (r *Runtime) sync(ctx context.Context, sess *Session, co *checkout) error {
	edits, err := r.db.SessionFiles(ctx, sess.ID)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(co.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	current := map[string]bool{}
	for _, e := range edits {
		current[e.Path] = true
		if v, ok := co.synced[e.Path]; ok && v == editVersion(&e) {
			continue
		}
		if err := replaceFile(root, e.Path, e.Content, !e.Deleted, co.uid, co.gid); err != nil {
			return fmt.Errorf("editsession: checkout %s: %w", e.Path, err)
		}
		co.synced[e.Path] = editVersion(&e)
	}
	for p := range co.synced {
		if current[p] {
			continue
		}
		content, exists, err := baseFile(ctx, r.code, sess, p)
		if err != nil {
			return err
		}
		if err := replaceFile(root, p, content, exists, co.uid, co.gid); err != nil {
			return fmt.Errorf("editsession: checkout %s: %w", p, err)
		}
		delete(co.synced, p)
	}
	return nil
}

// replaceFile removes whatever is at p (never following a link the
// session's user may have left there) and, when exists, writes content.
// What it creates belongs to the session's user with the modes an editor
// under umask 022 would give, and a file that was executable stays so: the
// person's own tools must be able to change it and the folders around it.
func replaceFile(root *os.Root, p string, content []byte, exists bool, uid, gid uint32) error {
	perm := fs.FileMode(0o644)
	if fi, err := root.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		perm = 0o755
	}
	if err := root.RemoveAll(p); err != nil {
		return err
	}
	if !exists {
		return nil
	}
	if err := mkdirAllOwned(root, path.Dir(p), uid, gid); err != nil {
		return err
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Lchown(p, int(uid), int(gid))
	}
	return err
}

// mkdirAllOwned creates the folders of dir that are missing, each 0755 and
// owned by the session's user; folders that exist are left as they are.
func mkdirAllOwned(root *os.Root, dir string, uid, gid uint32) error {
	if dir == "." || dir == "" {
		return nil
	}
	if err := mkdirAllOwned(root, path.Dir(dir), uid, gid); err != nil {
		return err
	}
	err := root.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return root.Lchown(dir, int(uid), int(gid))
}

// chownTree gives a freshly built tree to the session's user, without
// following links.
func chownTree(dir string, uid, gid uint32) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}

// captured is one entry of the checkout after a command.
type captured struct {
	kind    int // textFile, linkFile or leftOut
	content []byte
	link    string
	blob    string // a text file's git blob id
	// unread: a text file whose inode and times are those the last capture
	// read, so it holds the same content (blob); content is nil.
	unread bool
}

// seenFile is a text file as a capture read it.
type seenFile struct {
	key  statKey
	blob string
}

// statKey is what the kernel changes when a file's content may have
// changed. The sandboxed user sets mtime at will (touch -d), but not ctime:
// every write, and every change of mtime, sets ctime to the kernel's clock.
// The inode tells a file put in the place of another apart.
type statKey struct {
	dev, ino, size       uint64
	mtimeNsec, ctimeNsec int64
	mode                 uint32
}

func statKeyOf(fi fs.FileInfo) (statKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return statKey{}, false
	}
	return statKey{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size),
		mtimeNsec: st.Mtim.Nano(), ctimeNsec: st.Ctim.Nano(), mode: st.Mode}, true
}

func statKeyOfUnix(st *unix.Stat_t) statKey {
	return statKey{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size),
		mtimeNsec: st.Mtim.Nano(), ctimeNsec: st.Ctim.Nano(), mode: st.Mode}
}

// racyMargin: a file whose ctime is this close to (or after) the moment a
// capture began is read again by the next capture, as git treats a racily
// clean index entry. A write just after the reading could otherwise land
// in the same tick of the file system's clock, with the same ctime; a
// second covers file systems that keep whole seconds.
const racyMargin = time.Second

const (
	textFile = iota
	linkFile
	leftOut // present, but cannot be an edit; a LeftOut says why
)

// LeftOut is a path of the checkout that did not become an edit, and why.
type LeftOut struct {
	Path string
	Why  string
	// Unwalked: nothing at or below Path was read (its name is not a valid
	// path), so base files missing below it are not deletions.
	Unwalked bool
}

// Note is how the person reads it, after the command's output.
func (l LeftOut) Note() string { return l.Path + ": left out, " + l.Why }

// capture turns every difference between the checkout and the session's
// view into an edit, after every process of the session is gone. What
// cannot be an edit stays out, and the result says why.
func (r *Runtime) capture(ctx context.Context, sess *Session, co *checkout) ([]LeftOut, error) {
	base, err := r.baseEntries(ctx, sess, co)
	if err != nil {
		return nil, err
	}
	seen := co.seen
	co.seen = nil // until this capture is stored
	// The kernel's clock, which stamps ctime, not the runtime's.
	var files map[string]captured
	var nextSeen map[string]seenFile
	var left []LeftOut
	// looked are the paths this capture knows about; nil: every path.
	var looked map[string]bool
	if co.layered {
		files, nextSeen, left, looked, err = readChanged(co, base, seen, time.Now())
	} else {
		files, nextSeen, left, err = walkCheckout(co.dir, base, seen, time.Now())
	}
	if err != nil {
		return nil, err
	}
	// gone says whether a path that is not among files is absent from the
	// checkout, rather than unknown to this capture.
	gone := func(p string) bool {
		_, present := files[p]
		return !present && (looked == nil || looked[p])
	}
	// baseLooked are the base's paths to check for deletions.
	baseLooked := func(yield func(string, gitsvc.Entry) bool) {
		if looked == nil {
			for p, b := range base {
				if !yield(p, b) {
					return
				}
			}
			return
		}
		for p := range looked {
			if b, ok := base[p]; ok && !yield(p, b) {
				return
			}
		}
	}
	if looked != nil && asSynced(files, looked, base, co.synced) {
		// Nothing differs from what the session's edits already say: no
		// transaction, no new edits, as after `true`.
		for _, l := range left {
			delete(nextSeen, l.Path)
		}
		co.seen = nextSeen
		return left, nil
	}
	err = inSession(ctx, r.db, sess, func(tx *models.Store) error {
		edits, err := tx.SessionFiles(ctx, sess.ID)
		if err != nil {
			return err
		}
		edited := map[string]*models.SessionFile{}
		editBlob := map[string]string{}
		for i := range edits {
			edited[edits[i].Path] = &edits[i]
			if !edits[i].Deleted {
				editBlob[edits[i].Path] = gitBlobID(edits[i].Content)
			}
		}
		count := len(edits)
		// record stores what p now is (nil and deleted: gone), or forgets
		// the edit when that equals the base.
		record := func(p string, content []byte, deleted, equalsBase bool) error {
			_, had := edited[p]
			if equalsBase {
				if !had {
					return nil
				}
				count--
				return tx.DeleteSessionFile(ctx, sess.ID, p)
			}
			if !had {
				if count >= MaxPaths {
					left = append(left, LeftOut{Path: p, Why: fmt.Sprintf("the session already changes %d paths", MaxPaths)})
					return nil
				}
				count++
			}
			return tx.PutSessionFile(ctx, &models.SessionFile{SessionID: sess.ID, Path: p, Content: content, Deleted: deleted, UpdatedAt: r.now()})
		}

		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			f := files[p]
			b, inBase := base[p]
			switch f.kind {
			case leftOut:
				continue
			case linkFile:
				if !inBase || b.Mode != "120000" || gitBlobID([]byte(f.link)) != b.SHA {
					left = append(left, LeftOut{Path: p, Why: "a symbolic link is not an edit"})
				}
				continue
			}
			equalsBase := inBase && b.Type == "blob" && b.Mode != "120000" && f.blob == b.SHA
			e, had := edited[p]
			sameAsEdit := had && !e.Deleted && editBlob[p] == f.blob && (f.unread || bytes.Equal(e.Content, f.content))
			if sameAsEdit || !had && equalsBase {
				continue // as the session already sees it
			}
			content := f.content
			if f.unread { // unchanged, but the view moved meanwhile
				why := ""
				if content, why, err = readText(co.dir, p); err != nil {
					return err
				}
				if why != "" { // a shell changed it since the walk
					left = append(left, LeftOut{Path: p, Why: why})
					continue
				}
			}
			if err := record(p, nonNil(content), false, equalsBase); err != nil {
				return err
			}
		}
		// What the view has and the checkout lost was deleted.
		for p, b := range baseLooked {
			if !gone(p) || b.Type != "blob" || underUnwalked(p, left) {
				continue
			}
			if e, had := edited[p]; had && e.Deleted {
				continue
			}
			if err := record(p, nil, true, false); err != nil {
				return err
			}
		}
		for p, e := range edited {
			if !gone(p) || e.Deleted {
				continue
			}
			if _, inBase := base[p]; !inBase { // an added file, gone again
				if err := record(p, nil, true, true); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A path left out (too many changed paths) is read again next time,
	// so it is noted again or recorded once there is room.
	for _, l := range left {
		delete(nextSeen, l.Path)
	}
	co.seen = nextSeen
	return left, r.markDiverged(ctx, sess, co)
}

// asSynced reports whether every path a capture looked at is what the
// checkout was last told (synced: the session's edits as of the last sync
// or capture), or the base's where it was told nothing: a capture that
// would record nothing.
func asSynced(files map[string]captured, looked map[string]bool, base map[string]gitsvc.Entry, synced map[string]string) bool {
	for p := range looked {
		f, present := files[p]
		version, told := synced[p]
		b, inBase := base[p]
		baseBlob := inBase && b.Type == "blob" && b.Mode != "120000"
		switch {
		case present && f.kind == leftOut:
			// noted by the walk, never recorded
		case present && f.kind == linkFile:
			// The base's own link is as it was; any other gets a note.
			if !inBase || b.Mode != "120000" || gitBlobID([]byte(f.link)) != b.SHA {
				return false
			}
		case !present && told:
			if version != "deleted" {
				return false
			}
		case !present:
			if inBase && b.Type == "blob" {
				return false
			}
		case told:
			if version != f.blob {
				return false
			}
		default:
			if !baseBlob || f.blob != b.SHA {
				return false
			}
		}
	}
	return true
}

// readText reads one file of the checkout again, as walkCheckout does.
func readText(dir, p string) (content []byte, why string, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	content, why, _, err = readRegular(root, p)
	return content, why, err
}

// underUnwalked reports a base path inside a folder the walk did not read;
// its absence is not a deletion.
func underUnwalked(p string, left []LeftOut) bool {
	for _, l := range left {
		if l.Unwalked && strings.HasPrefix(p, l.Path+"/") {
			return true
		}
	}
	return false
}

func (r *Runtime) markDiverged(ctx context.Context, sess *Session, co *checkout) error {
	edits, err := r.db.SessionFiles(ctx, sess.ID)
	if err != nil {
		return err
	}
	co.synced = map[string]string{}
	for i := range edits {
		co.synced[edits[i].Path] = editVersion(&edits[i])
	}
	return nil
}

// editVersion names what an edit makes of its path: deleted, or the
// content's blob id.
func editVersion(e *models.SessionFile) string {
	if e.Deleted {
		return "deleted"
	}
	return gitBlobID(e.Content)
}

// walkCheckout reads every regular file of dir through an os.Root, never
// following a link and never blocking on a special file, and says what it
// left out. A text file whose statKey is the one in seen is not read (see
// captured.unread). The answer's seen is for the next walk: the text files
// read or skipped, less those changed too close to began, when this walk
// started (racyMargin).
func walkCheckout(dir string, base map[string]gitsvc.Entry, seen map[string]seenFile, began time.Time) (map[string]captured, map[string]seenFile, []LeftOut, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer root.Close()
	trustBefore := began.Add(-racyMargin).UnixNano()
	files := map[string]captured{}
	nextSeen := map[string]seenFile{}
	var left []LeftOut
	var walk func(rel string) error
	walk = func(rel string) error {
		name := rel
		if name == "" {
			name = "."
		}
		d, err := root.Open(name)
		if err != nil {
			return err
		}
		entries, err := d.ReadDir(-1)
		if err != nil {
			d.Close()
			return err
		}
		// The files this walk saw before are looked at through the
		// folder's descriptor, one system call each, before the folder
		// is closed and the walk goes deeper.
		keys := map[string]statKey{}
		for _, e := range entries {
			if e.Type().IsRegular() && seen != nil {
				var st unix.Stat_t
				if unix.Fstatat(int(d.Fd()), e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					keys[e.Name()] = statKeyOfUnix(&st)
				}
			}
		}
		d.Close()
		for _, e := range entries {
			p := e.Name()
			if rel != "" {
				p = rel + "/" + p
			}
			if err := workspace.CheckRelPath(p); err != nil {
				left = append(left, LeftOut{Path: p, Why: "not a valid path", Unwalked: true})
				continue
			}
			switch t := e.Type(); {
			case t.IsDir():
				if b, ok := base[p]; ok && b.Type == "commit" {
					continue // a submodule's folder
				}
				if err := walk(p); err != nil {
					return err
				}
			case t&fs.ModeSymlink != 0:
				target, err := root.Readlink(p)
				if err != nil {
					return err
				}
				files[p] = captured{kind: linkFile, link: target}
			case t.IsRegular():
				key, known := keys[e.Name()]
				if err := lookAtFile(root, p, key, known, seen, nextSeen, trustBefore, files, &left); err != nil {
					return err
				}
			default:
				left = append(left, LeftOut{Path: p, Why: "not a regular file"})
				files[p] = captured{kind: leftOut}
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, nil, nil, err
	}
	return files, nextSeen, left, nil
}

// lookAtFile records the regular file p in files: not read again when
// its statKey (key, when known) is the one in seen, else read and, unless
// changed too close to the capture's start, kept in nextSeen for the next.
func lookAtFile(root *os.Root, p string, key statKey, known bool, seen, nextSeen map[string]seenFile,
	trustBefore int64, files map[string]captured, left *[]LeftOut) error {
	if prev, ok := seen[p]; ok && known && key == prev.key && key.mode&unix.S_IFMT == unix.S_IFREG {
		files[p] = captured{kind: textFile, blob: prev.blob, unread: true}
		nextSeen[p] = prev
		return nil
	}
	content, why, key, err := readRegular(root, p)
	if err != nil {
		return err
	}
	if why != "" {
		*left = append(*left, LeftOut{Path: p, Why: why})
		files[p] = captured{kind: leftOut}
		return nil
	}
	blob := gitBlobID(content)
	files[p] = captured{kind: textFile, content: content, blob: blob}
	if key != (statKey{}) && key.ctimeNsec < trustBefore {
		nextSeen[p] = seenFile{key: key, blob: blob}
	}
	return nil
}

// readChanged is walkCheckout for a layered checkout: it looks only at the
// paths the upper layer holds (what was written, and the marks of what
// was deleted), those of the base that a deleted or replaced folder hid,
// and those of known edits. The answer's looked are those paths; any other
// path of the base is as the base has it.
func readChanged(co *checkout, base map[string]gitsvc.Entry, seen map[string]seenFile, began time.Time) (
	files map[string]captured, nextSeen map[string]seenFile, left []LeftOut, looked map[string]bool, err error) {
	upper, err := sandbox.ReadUpper(co.upper)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	looked = map[string]bool{}
	baseBelow := func(dir string) {
		prefix := dir + "/"
		for p := range base {
			if strings.HasPrefix(p, prefix) {
				looked[p] = true
			}
		}
	}
	for _, e := range upper {
		if inSubmodule(e.Path, base) || underUnwalked(e.Path, left) {
			continue
		}
		if workspace.CheckRelPath(e.Path) != nil {
			if !e.Whiteout {
				left = append(left, LeftOut{Path: e.Path, Why: "not a valid path", Unwalked: true})
			}
			continue
		}
		looked[e.Path] = true
		if !e.Dir || e.Opaque {
			baseBelow(e.Path) // a folder of the base deleted, or replaced
		}
	}
	for p := range co.synced {
		looked[p] = true
	}

	root, err := os.OpenRoot(co.dir)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer root.Close()
	trustBefore := began.Add(-racyMargin).UnixNano()
	files, nextSeen = map[string]captured{}, map[string]seenFile{}
	// realDir: whether a folder is one, all the way up, as a walk from the
	// top would have entered it; a path below a link is not in the tree.
	dirs := map[string]bool{".": true}
	var realDir func(d string) bool
	realDir = func(d string) bool {
		if ok, known := dirs[d]; known {
			return ok
		}
		ok := realDir(path.Dir(d))
		if ok {
			fi, err := root.Lstat(d)
			ok = err == nil && fi.IsDir()
		}
		dirs[d] = ok
		return ok
	}
	for p := range looked {
		if !realDir(path.Dir(p)) {
			continue
		}
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, nil, nil, nil, err
		}
		switch t := fi.Mode().Type(); {
		case t.IsDir():
			continue
		case t&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			files[p] = captured{kind: linkFile, link: target}
		case t.IsRegular():
			key, known := statKeyOf(fi)
			if err := lookAtFile(root, p, key, known, seen, nextSeen, trustBefore, files, &left); err != nil {
				return nil, nil, nil, nil, err
			}
		default:
			left = append(left, LeftOut{Path: p, Why: "not a regular file"})
			files[p] = captured{kind: leftOut}
		}
	}
	return files, nextSeen, left, looked, nil
}

// inSubmodule reports a path inside a submodule's folder of the base,
// which is not the session's to change.
func inSubmodule(p string, base map[string]gitsvc.Entry) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if b, ok := base[d]; ok && b.Type == "commit" {
			return true
		}
	}
	return false
}

// readRegular reads a file of at most MaxFileBytes that is text, or says why
// it is not an edit; key is the file's as it was opened.
func readRegular(root *os.Root, p string) (content []byte, why string, key statKey, err error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", key, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", key, err
	}
	key, _ = statKeyOf(fi)
	if !fi.Mode().IsRegular() {
		return nil, "not a regular file", key, nil
	}
	if fi.Size() > MaxFileBytes {
		return nil, "larger than " + strconv.Itoa(MaxFileBytes/1024) + " KiB", key, nil
	}
	content, err = io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, "", key, err
	}
	if len(content) > MaxFileBytes {
		return nil, "larger than " + strconv.Itoa(MaxFileBytes/1024) + " KiB", key, nil
	}
	if bytes.IndexByte(content, 0) >= 0 {
		return nil, "a binary file", key, nil
	}
	return content, "", key, nil
}
