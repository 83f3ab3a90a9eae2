package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// sharedBases holds the trees of the bases that workspaces on this host
// start from, each unpacked once for all the workspaces of its Base.ID: a
// second session of a commit starts without exporting it again. A tree is
// root's and never written: each workspace mounts it as its overlay's
// lower layer through a mount that shows its files as the session's user's
// (an idmapped mount), and everything the session writes lands in its own
// upper layer. A tree goes when the last workspace on it does.
type sharedBases struct {
	area string // root's, 0700; a tree's folder has a name of its own, never its ID
	log  *slog.Logger

	mu    sync.Mutex
	trees map[string]*baseTree // by Base.ID
	// off: this host cannot mount a tree for a session (no idmapped
	// mounts, or no overlay); every workspace unpacks its own.
	off bool
}

// errNoIdmap: the host cannot show a shared base's files as a session's
// user's (no idmapped mounts on its file system, or none at all).
var errNoIdmap = errors.New("sandbox: no idmapped mounts here")

// baseTree is one unpacked base and the workspaces on it.
type baseTree struct {
	id    string
	refs  int           // workspaces on it, and builds waiting for it; guarded by sharedBases.mu
	ready chan struct{} // closed once unpacked, or failed (err)
	dir   string        // set before ready closes; "" when not even made
	err   error
}

func newSharedBases(area string, log *slog.Logger) *sharedBases {
	return &sharedBases{area: area, log: log, trees: map[string]*baseTree{}}
}

// take returns the tree of base, unpacking it when no workspace has it yet
// (once, however many builds ask at the same moment), with a reference
// the caller gives back with release. ok is false when the host does not
// share trees or base has no ID.
func (b *sharedBases) take(ctx context.Context, base Base) (tree *baseTree, ok bool, err error) {
	id := base.ID()
	b.mu.Lock()
	if b.off || id == "" {
		b.mu.Unlock()
		return nil, false, nil
	}
	tree = b.trees[id]
	unpack := tree == nil
	if unpack {
		tree = &baseTree{id: id, ready: make(chan struct{})}
		b.trees[id] = tree
	}
	tree.refs++
	b.mu.Unlock()

	if unpack {
		tree.dir, tree.err = b.unpack(ctx, base)
		close(tree.ready)
	}
	select {
	case <-tree.ready:
	case <-ctx.Done():
		b.release(tree)
		return nil, false, ctx.Err()
	}
	if tree.err != nil {
		b.release(tree)
		return nil, false, tree.err
	}
	return tree, true, nil
}

// unpack writes base into a new folder of the area, root's, which only
// root may reach: the tree is seen through the sessions' mounts alone. Its
// name is new in the area whoever else writes there (instances that share
// an area by mistake, a previous run's leftovers).
func (b *sharedBases) unpack(ctx context.Context, base Base) (dir string, err error) {
	if err := os.MkdirAll(b.area, 0o700); err != nil {
		return "", fmt.Errorf("sandbox: shared bases: %w", err)
	}
	if dir, err = os.MkdirTemp(b.area, "t"); err != nil {
		return "", fmt.Errorf("sandbox: shared base: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, fmt.Errorf("sandbox: shared base: %w", err)
	}
	return dir, unpackBase(ctx, base, dir)
}

// release gives back a reference take gave; the last one removes the tree.
// A failed tree leaves the map at once, so that the next build tries
// afresh.
func (b *sharedBases) release(tree *baseTree) {
	b.mu.Lock()
	tree.refs--
	last := tree.refs == 0
	if (last || tree.failed()) && b.trees[tree.id] == tree {
		delete(b.trees, tree.id)
	}
	b.mu.Unlock()
	if last {
		<-tree.ready // its unpacking has ended, whoever waited for it
		if tree.dir == "" {
			return
		}
		if err := RemoveTree(tree.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Warn("a shared base was not removed; the next start removes it", "dir", tree.dir, "err", err)
		}
	}
}

// failed says the tree could not be unpacked, once its unpacking ended.
func (t *baseTree) failed() bool {
	select {
	case <-t.ready:
		return t.err != nil
	default:
		return false
	}
}

// turnOff makes every later build unpack its own base: this host cannot
// mount a shared tree for a session.
func (b *sharedBases) turnOff() {
	b.mu.Lock()
	b.off = true
	b.mu.Unlock()
}

// clean removes the trees a previous run of the server left: no workspace
// is on them any more (Recover has taken their overlays down).
func (b *sharedBases) clean() error {
	entries, err := os.ReadDir(b.area)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: shared bases: %w", err)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, RemoveTree(filepath.Join(b.area, e.Name())))
	}
	return errors.Join(errs...)
}
