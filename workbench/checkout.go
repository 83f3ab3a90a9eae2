package workbench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"atelier/editsession"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/sandbox"
)

// checkoutIdle is how long a checkout stays after its last command; the
// next command has the provider build it again from the fork and the
// edits (ADR 0029).
const checkoutIdle = 2 * time.Minute

// checkout is what the workbench knows of a session's checkout, which
// its provider keeps: the base tree with the session's edits on top, owned
// by the session's user.
type checkout struct {
	ref sandbox.Session
	// layered: the provider's capture walk (Changed) meets only what was
	// written or deleted; otherwise it walks the whole checkout.
	layered bool
	// synced maps each path that differs from the base in the checkout to
	// the version of the edit it holds (editVersion); the next sync writes
	// only edits that changed since, so changes a shell made meanwhile are
	// not undone. The version is the content, not a time: two saves within
	// one clock tick must still both reach the checkout.
	synced   map[string]string
	lastUsed time.Time
	// seen is what the last capture read of each text file, by the file's
	// inode and times, so the next reads only what changed (FileStat).
	seen map[string]seenFile
	// base is the tree of baseCommit (baseEntries), shared with the other
	// checkouts of the commit: a commit does not change.
	base       *baseListing
	baseCommit string
}

// gitBase is a session's base, the fork at its base commit, as the tar
// stream a provider unpacks.
type gitBase struct {
	git    *gitsvc.Service
	repo   *gitsvc.Repo
	commit string
}

func (b gitBase) WriteTar(ctx context.Context, w io.Writer) error {
	return b.git.Archive(ctx, b.repo, b.commit, w)
}

// ID is the commit: its archive is its tree, whichever repository holds
// it (gitsvc.Archive applies no attributes).
func (b gitBase) ID() string { return b.commit }

// checkouts tracks the live checkouts of this instance, one command at a
// time per session.
type checkouts struct {
	mu    sync.Mutex
	live  map[string]*checkout
	locks map[string]*sync.Mutex
	// starting counts, by session, the shells prepared and not yet
	// registered as terminals: their helpers start outside the session's
	// lock, and what waits for the session's shells to be gone (the
	// capture after the last one, its kill) must wait for them too.
	starting map[string]int
}

func newCheckouts() *checkouts {
	return &checkouts{live: map[string]*checkout{}, locks: map[string]*sync.Mutex{}, starting: map[string]int{}}
}

// tryLock takes the session's lock when nobody holds it.
func (c *checkouts) tryLock(id string) (unlock func(), ok bool) {
	c.mu.Lock()
	l, found := c.locks[id]
	if !found {
		l = &sync.Mutex{}
		c.locks[id] = l
	}
	c.mu.Unlock()
	if !l.TryLock() {
		return nil, false
	}
	return l.Unlock, true
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
func (r *Runtime) baseEntries(ctx context.Context, sess editsession.Identity, co *checkout) (map[string]gitsvc.Entry, error) {
	if co.base == nil || co.baseCommit != sess.Source.Commit {
		listing, err := r.listings.get(sess.Source.Commit, func() (map[string]gitsvc.Entry, error) {
			_, all, err := r.git.ListAll(ctx, sess.Source.Repo, sess.Source.Commit)
			if err != nil {
				return nil, err
			}
			m := make(map[string]gitsvc.Entry, len(all))
			for _, e := range all {
				if e.Type != "tree" {
					m[e.Path] = e
				}
			}
			return m, nil
		})
		if err != nil {
			return nil, err
		}
		co.base, co.baseCommit = listing, sess.Source.Commit
	}
	return co.base.entries, nil
}

// basePaths are the paths of the base's files and links, sorted, so the
// ones below a folder are found without looking at the others.
func (co *checkout) basePaths() []string { return co.base.paths() }

// holdsBase says the base has a file or link below the folder p.
func (co *checkout) holdsBase(p string) bool { return co.base.holds(p) }

// sync writes into the checkout the edits saved since it last saw them
// (in the editor, say), and the base again where an edit went away. The
// edits are compared by the digests PostgreSQL keeps, and only the
// changed ones are read, one at a time.
func (r *Runtime) sync(ctx context.Context, sess editsession.Identity, co *checkout) error {
	versions, err := r.edits.EditVersions(ctx, sess.ID)
	if err != nil {
		return err
	}
	current := make(map[string]bool, len(versions))
	for i := range versions {
		p := versions[i].Path
		current[p] = true
		if v, ok := co.synced[p]; ok && v == storedVersion(&versions[i]) {
			continue
		}
		e, err := r.edits.Edit(ctx, sess.ID, p)
		if errors.Is(err, models.ErrNotFound) {
			continue // forgotten meanwhile: the next sync puts the base back
		}
		if err != nil {
			return err
		}
		if err := r.sb.Provider.Write(ctx, co.ref, sandbox.File{Path: p, Content: e.Content, Exists: !e.Deleted}); err != nil {
			return err
		}
		co.synced[p] = editVersion(e)
	}
	for p := range co.synced {
		if current[p] {
			continue
		}
		content, exists, err := r.edits.BaseFile(ctx, sess, p)
		if err != nil {
			return err
		}
		if err := r.sb.Provider.Write(ctx, co.ref, sandbox.File{Path: p, Content: content, Exists: exists}); err != nil {
			return err
		}
		delete(co.synced, p)
	}
	return nil
}
