package codestore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage"
)

// Stats says what one publish stored and what the object store already had.
type Stats struct {
	Trees, Blobs               int
	SkippedTrees, SkippedBlobs int
	Bytes                      int64
}

// parallelPuts is how many uploads run at once; object stores reward a few
// concurrent requests, and more would only hold more buffers in memory.
const parallelPuts = 4

// streamAbove is the size from which a blob streams from its own git
// process into the store instead of being read through the shared
// cat-file batch. Smaller ones are read whole, so a publish holds at most
// parallelPuts of them; a process per blob would cost more than the blob.
const streamAbove = 1 << 20

// flushEvery is how many stored objects are recorded per database write.
const flushEvery = 500

// Publish stores the tree of commit: every tree and blob the object store
// does not hold yet (by the database index, never by listing the store),
// then records the commit as published. Publishing a published commit does
// nothing; an interrupted publish keeps what it stored and the next one
// carries on.
//
// Objects go up bottom-up: blobs first, then trees from the deepest level to
// the root, each level after the one below it is stored. So a stored tree
// always means its whole subtree is stored, and a publish only looks inside
// trees the index lacks: after a change of ten files in a large tree it
// checks the trees and the few folders that changed, not every blob.
//
// Two publishes of one commit at once (an import's and the server's retry
// pass, say) share one run: the second waits for the first and stores
// nothing itself, so a large tree is never read and uploaded twice at once.
func (s *Store) Publish(ctx context.Context, r *gitsvc.Repo, commit string) (Stats, error) {
	run := &publishRun{done: make(chan struct{})}
	if v, running := s.publishing.LoadOrStore(commit, run); running {
		other := v.(*publishRun)
		select {
		case <-other.done:
			return Stats{}, other.err
		case <-ctx.Done():
			return Stats{}, fmt.Errorf("codestore: publish %s: %w", commit, ctx.Err())
		}
	}
	defer func() {
		s.publishing.Delete(commit)
		close(run.done)
	}()
	var st Stats
	st, run.err = s.publish(ctx, r, commit)
	return st, run.err
}

// publishRun is a publish under way; err is set before done is closed.
type publishRun struct {
	done chan struct{}
	err  error
}

func (s *Store) publish(ctx context.Context, r *gitsvc.Repo, commit string) (Stats, error) {
	var st Stats
	if _, ok := s.publishedRoot(ctx, commit); ok {
		return st, nil
	}
	root, all, err := s.git.ListAll(ctx, r, commit)
	if err != nil {
		return st, fmt.Errorf("codestore: publish %s: %w", commit, err)
	}
	trees := collect(root, all)

	treeKeys := make([]string, 0, len(trees))
	for sha := range trees {
		treeKeys = append(treeKeys, treeKey(sha))
	}
	haveTree, err := s.db.StoredKeys(ctx, treeKeys)
	if err != nil {
		return st, err
	}
	missing := missingTrees(trees, root, haveTree)
	blobs := map[string]int64{} // sha → size
	for _, t := range missing {
		for _, e := range trees[t].entries {
			if e.Kind == KindFile || e.Kind == KindSymlink {
				blobs[e.SHA] = e.Size
			}
		}
	}
	blobKeys := make([]string, 0, len(blobs))
	for sha := range blobs {
		blobKeys = append(blobKeys, blobKey(sha))
	}
	haveBlob, err := s.db.StoredKeys(ctx, blobKeys)
	if err != nil {
		return st, err
	}

	var small, large []string
	for sha, size := range blobs {
		switch {
		case haveBlob[blobKey(sha)]:
		case size > streamAbove:
			large = append(large, sha)
		default:
			small = append(small, sha)
		}
	}
	if err := s.putSmallBlobs(ctx, r, small, &st); err != nil {
		return st, err
	}
	// Large blobs stream one git process each, after the batch is closed:
	// each takes the repository's read lock, and a second read lock of
	// ours behind a waiting writer would wait for the first.
	up := newUploader(ctx, s.objects, s.db)
	for _, sha := range large {
		if !up.put(blobKey(sha), blobs[sha], func(ctx context.Context) io.ReadCloser { return s.streamBlob(ctx, r, sha) }) {
			break
		}
		st.Blobs++
		st.Bytes += blobs[sha]
	}
	if err := up.wait(); err != nil {
		return st, err
	}
	for _, level := range byDepthDeepestFirst(trees, missing) {
		up = newUploader(ctx, s.objects, s.db)
		for _, sha := range level {
			data := encodeTree(trees[sha].entries)
			if !up.put(treeKey(sha), int64(len(data)), bytesOf(data)) {
				break
			}
			st.Trees++
		}
		if err := up.wait(); err != nil {
			return st, err
		}
	}
	// The path index goes up before the commit counts as published, so a
	// published commit's quick open never has to list the tree with git.
	if haveIndex, err := s.db.StoredKeys(ctx, []string{indexKey(root)}); err != nil {
		return st, err
	} else if !haveIndex[indexKey(root)] {
		if err := s.putIndex(ctx, root, filePaths(all)); err != nil {
			return st, err
		}
	}
	if err := s.db.AddPublishedCommit(ctx, commit, root); err != nil {
		return st, err
	}
	s.roots.Store(commit, root)
	st.SkippedTrees = len(trees) - st.Trees
	st.SkippedBlobs = countBlobs(trees) - st.Blobs
	return st, nil
}

// putSmallBlobs reads the blobs through one cat-file batch and stores
// them, a few at a time.
func (s *Store) putSmallBlobs(ctx context.Context, r *gitsvc.Repo, shas []string, st *Stats) error {
	if len(shas) == 0 {
		return nil
	}
	batch, err := s.git.OpenBatch(ctx, r)
	if err != nil {
		return err
	}
	defer batch.Close()
	up := newUploader(ctx, s.objects, s.db)
	for _, sha := range shas {
		_, data, err := batch.Read(sha)
		if err != nil {
			return up.abort(fmt.Errorf("codestore: blob %s: %w", sha, err))
		}
		if !up.put(blobKey(sha), int64(len(data)), bytesOf(data)) {
			break
		}
		st.Blobs++
		st.Bytes += int64(len(data))
	}
	return up.wait()
}

// treeInfo is one distinct tree of a commit.
type treeInfo struct {
	entries []Entry // display order
	depth   int     // 0 for the root; the deepest place it appears
}

// collect groups a recursive listing into its distinct trees; identical
// subtrees collapse into one.
func collect(root string, all []gitsvc.Entry) map[string]*treeInfo {
	children := map[string][]Entry{"": nil}
	treeOf := map[string]string{"": root}
	for _, g := range all {
		dir, name := splitPath(g.Path)
		e := fromGit(g, name)
		children[dir] = append(children[dir], e)
		if e.Kind == KindDir {
			treeOf[g.Path] = g.SHA
		}
	}
	trees := make(map[string]*treeInfo, len(treeOf))
	for dir, sha := range treeOf {
		depth := 0
		if dir != "" {
			depth = strings.Count(dir, "/") + 1
		}
		if t, ok := trees[sha]; ok {
			t.depth = max(t.depth, depth)
			continue
		}
		es := children[dir]
		if es == nil {
			es = []Entry{}
		}
		sortEntries(es)
		trees[sha] = &treeInfo{entries: es, depth: depth}
	}
	return trees
}

// missingTrees walks down from the root into trees the store lacks only: a
// stored tree's subtree is stored too.
func missingTrees(trees map[string]*treeInfo, root string, have map[string]bool) []string {
	var missing []string
	seen := map[string]bool{}
	stack := []string{root}
	for len(stack) > 0 {
		sha := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[sha] || have[treeKey(sha)] {
			continue
		}
		seen[sha] = true
		missing = append(missing, sha)
		for _, e := range trees[sha].entries {
			if e.Kind == KindDir {
				stack = append(stack, e.SHA)
			}
		}
	}
	return missing
}

// byDepthDeepestFirst groups trees into levels, deepest level first. A tree
// that appears at several depths is placed by the deepest: every tree that
// names it sits at least one level above that, so it is stored first.
func byDepthDeepestFirst(trees map[string]*treeInfo, shas []string) [][]string {
	maxDepth := 0
	for _, sha := range shas {
		maxDepth = max(maxDepth, trees[sha].depth)
	}
	levels := make([][]string, maxDepth+1)
	for _, sha := range shas {
		d := maxDepth - trees[sha].depth
		levels[d] = append(levels[d], sha)
	}
	return levels
}

// countBlobs is how many distinct blobs the trees name.
func countBlobs(trees map[string]*treeInfo) int {
	blobs := map[string]bool{}
	for _, t := range trees {
		for _, e := range t.entries {
			if e.Kind == KindFile || e.Kind == KindSymlink {
				blobs[e.SHA] = true
			}
		}
	}
	return len(blobs)
}

// uploader puts objects a few at a time and records each stored one in the
// index, so that even a failed publish need not store it again.
type uploader struct {
	ctx     context.Context
	objects storage.ObjectStore
	db      *models.Store
	slots   chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	err    error
	stored []models.StoredObject
}

func newUploader(ctx context.Context, objects storage.ObjectStore, db *models.Store) *uploader {
	return &uploader{ctx: ctx, objects: objects, db: db, slots: make(chan struct{}, parallelPuts)}
}

// bytesOf is a source of data already in memory.
func bytesOf(data []byte) func(context.Context) io.ReadCloser {
	return func(context.Context) io.ReadCloser { return io.NopCloser(bytes.NewReader(data)) }
}

// put starts storing size bytes from open's reader under key, opened once
// an upload slot is free; it returns false once an upload failed.
func (u *uploader) put(key string, size int64, open func(context.Context) io.ReadCloser) bool {
	select {
	case u.slots <- struct{}{}:
	case <-u.ctx.Done():
		u.fail(u.ctx.Err())
		return false
	}
	if u.failed() {
		<-u.slots
		return false
	}
	u.wg.Add(1)
	go func() {
		defer func() { <-u.slots; u.wg.Done() }()
		rc := open(u.ctx)
		var err error
		if b, ok := u.objects.(storage.Batcher); ok {
			err = b.PutBatched(u.ctx, key, rc, size) // durable by record below
		} else {
			err = u.objects.Put(u.ctx, key, rc, size)
		}
		rc.Close()
		if err != nil {
			u.fail(fmt.Errorf("codestore: store %s: %w", key, err))
			return
		}
		u.mu.Lock()
		u.stored = append(u.stored, models.StoredObject{Key: key, Size: size})
		var flush []models.StoredObject
		if len(u.stored) >= flushEvery {
			flush, u.stored = u.stored, nil
		}
		u.mu.Unlock()
		if flush != nil {
			if err := u.record(u.ctx, flush); err != nil {
				u.fail(err)
			}
		}
	}()
	return true
}

// record adds stored objects to the index once they are durable: an object
// the index names is never lost to a crash.
func (u *uploader) record(ctx context.Context, stored []models.StoredObject) error {
	if len(stored) == 0 {
		return nil
	}
	if b, ok := u.objects.(storage.Batcher); ok {
		if err := b.Sync(ctx); err != nil {
			return fmt.Errorf("codestore: %w", err)
		}
	}
	return u.db.AddStoredObjects(ctx, stored)
}

func (u *uploader) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err == nil {
		u.err = err
	}
}

func (u *uploader) failed() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err != nil
}

// wait lets running uploads finish, records what they stored and returns
// the first failure.
func (u *uploader) wait() error {
	u.wg.Wait()
	if err := u.record(context.WithoutCancel(u.ctx), u.stored); err != nil && u.err == nil {
		u.err = err
	}
	u.stored = nil
	return u.err
}

// abort waits for running uploads and returns err.
func (u *uploader) abort(err error) error {
	u.fail(err)
	return u.wait()
}
