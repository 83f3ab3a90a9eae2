package codestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

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
// then records the commit as published with the size of its files.
// Publishing a published commit does nothing; an interrupted publish keeps
// what it stored and the next one carries on.
//
// Objects go up bottom-up: blobs first, then trees from the deepest level to
// the root, each level after the one below it is stored. So a stored tree
// always means its blobs are stored (the collector keeps it so), and a
// publish looks at the blobs of the trees the index lacks only: after a
// change of ten files in a large tree it checks the trees and the few
// folders that changed, not every blob.
//
// The collector may run meanwhile. A publish claims what it finds stored
// (models.ClaimStoredObjects) before counting on it, takes a key off the
// collector's list before uploading it (models.ClearDoomed), and records
// objects and the commit only within three quarters of the grace after its
// first claim; past that it starts over (collect.go tells why this is
// enough).
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

// publishAttempts is how many times a publish starts over when it outlived
// its grace; each start after the first finds most objects stored.
const publishAttempts = 3

// ErrPublishTooSlow is a publish that outlived its grace every time.
var ErrPublishTooSlow = errors.New("codestore: the publish took longer than the collector's grace, each time")

func (s *Store) publish(ctx context.Context, r *gitsvc.Repo, commit string) (Stats, error) {
	var st Stats
	// The database, not the cache, says whether the commit is published:
	// the collector unpublishes commits no longer live.
	pc, err := s.db.PublishedCommitOf(ctx, commit)
	if err != nil && !errors.Is(err, models.ErrNotFound) {
		return st, err
	}
	if err == nil && pc.TreeBytes != nil {
		s.roots.Store(commit, pc.RootTree)
		return st, nil
	}
	root, all, err := s.git.ListAll(ctx, r, commit)
	if err != nil {
		return st, fmt.Errorf("codestore: publish %s: %w", commit, err)
	}
	if pc != nil {
		// Published before sizes were recorded: measure it.
		return st, s.db.SetTreeBytes(ctx, commit, treeBytes(all))
	}
	trees := collect(root, all)
	for range publishAttempts {
		var done bool
		st, done, err = s.publishOnce(ctx, r, commit, root, all, trees)
		if err != nil || done {
			return st, err
		}
		s.log.Warn("codestore: a publish outlived the collector's grace; claiming again", "commit", commit, "grace", s.opts.Grace)
	}
	return st, fmt.Errorf("codestore: publish %s: %w", commit, ErrPublishTooSlow)
}

// publishOnce claims what is stored, stores what is missing and records
// the commit, all before the deadline its first claim sets; done is false
// when the deadline passed first.
func (s *Store) publishOnce(ctx context.Context, r *gitsvc.Repo, commit, root string, all []gitsvc.Entry, trees map[string]*treeInfo) (st Stats, done bool, err error) {
	defer func() {
		if errors.Is(err, errPastDeadline) {
			err = nil // start over
		}
	}()
	began, err := s.db.Now(ctx)
	if err != nil {
		return st, false, err
	}
	deadline := began.Add(s.opts.Grace * 3 / 4)

	treeKeys := make([]string, 0, len(trees))
	for sha := range trees {
		treeKeys = append(treeKeys, treeKey(sha))
	}
	haveTree, err := s.db.ClaimStoredObjects(ctx, treeKeys)
	if err != nil {
		return st, false, err
	}
	// Every tree the index lacks is uploaded, even below a stored one: the
	// collector may have taken a tree from below a tree it kept. Only the
	// blobs of a stored tree are trusted (collect.go says why they may be).
	var missing []string
	for sha := range trees {
		if !haveTree[treeKey(sha)] {
			missing = append(missing, sha)
		}
	}
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
	haveBlob, err := s.db.ClaimStoredObjects(ctx, blobKeys)
	if err != nil {
		return st, false, err
	}

	var small, large, uploads []string
	for sha, size := range blobs {
		switch {
		case haveBlob[blobKey(sha)]:
			continue
		case size > streamAbove:
			large = append(large, sha)
		default:
			small = append(small, sha)
		}
		uploads = append(uploads, blobKey(sha))
	}
	for _, sha := range missing {
		uploads = append(uploads, treeKey(sha))
	}
	if err := s.db.ClearDoomed(ctx, uploads); err != nil {
		return st, false, err
	}
	if err := s.putSmallBlobs(ctx, r, small, deadline, &st); err != nil {
		return st, false, err
	}
	// Large blobs stream one git process each, after the batch is closed:
	// each takes the repository's read lock, and a second read lock of
	// ours behind a waiting writer would wait for the first.
	up := newUploader(ctx, s.objects, s.db, deadline)
	for _, sha := range large {
		if !up.put(blobKey(sha), blobs[sha], func(ctx context.Context) io.ReadCloser { return s.streamBlob(ctx, r, sha) }) {
			break
		}
		st.Blobs++
		st.Bytes += blobs[sha]
	}
	if err := up.wait(); err != nil {
		return st, false, err
	}
	for _, level := range byDepthDeepestFirst(trees, missing) {
		up = newUploader(ctx, s.objects, s.db, deadline)
		for _, sha := range level {
			data := encodeTree(trees[sha].entries)
			if !up.put(treeKey(sha), int64(len(data)), bytesOf(data)) {
				break
			}
			st.Trees++
		}
		if err := up.wait(); err != nil {
			return st, false, err
		}
	}
	// The path index goes up before the commit counts as published, so a
	// published commit's quick open never has to list the tree with git.
	if err := s.putIndex(ctx, root, filePaths(all), deadline); err != nil {
		return st, false, err
	}
	ok, err := s.db.AddPublishedCommit(ctx, commit, root, treeBytes(all), deadline)
	if err != nil || !ok {
		return st, false, err
	}
	s.roots.Store(commit, root)
	st.SkippedTrees = len(trees) - st.Trees
	st.SkippedBlobs = countBlobs(trees) - st.Blobs
	return st, true, nil
}

// treeBytes is the size of the files of a recursive listing, each path
// counted, links by their target's length: what a checkout of it holds.
func treeBytes(all []gitsvc.Entry) int64 {
	var n int64
	for _, g := range all {
		if g.Type == "blob" && g.Size > 0 {
			n += g.Size
		}
	}
	return n
}

// putSmallBlobs reads the blobs through one cat-file batch and stores
// them, a few at a time.
func (s *Store) putSmallBlobs(ctx context.Context, r *gitsvc.Repo, shas []string, deadline time.Time, st *Stats) error {
	if len(shas) == 0 {
		return nil
	}
	batch, err := s.git.OpenBatch(ctx, r)
	if err != nil {
		return err
	}
	defer batch.Close()
	up := newUploader(ctx, s.objects, s.db, deadline)
	err = batch.ReadEach(shas, func(i int, _ string, data []byte) error {
		if !up.put(blobKey(shas[i]), int64(len(data)), bytesOf(data)) {
			return errUploadStopped
		}
		st.Blobs++
		st.Bytes += int64(len(data))
		return nil
	})
	if err != nil && !errors.Is(err, errUploadStopped) {
		return up.abort(fmt.Errorf("codestore: blobs: %w", err))
	}
	return up.wait()
}

// errUploadStopped ends a reading of blobs once the uploader has stopped
// (a failed upload, or the deadline): up.wait says why.
var errUploadStopped = errors.New("codestore: the uploads stopped")

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
// index, so that even a failed publish need not store it again, provided
// the deadline has not passed.
type uploader struct {
	ctx      context.Context
	objects  storage.ObjectStore
	db       *models.Store
	deadline time.Time
	slots    chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	err    error
	stored []models.StoredObject
}

func newUploader(ctx context.Context, objects storage.ObjectStore, db *models.Store, deadline time.Time) *uploader {
	return &uploader{ctx: ctx, objects: objects, db: db, deadline: deadline, slots: make(chan struct{}, parallelPuts)}
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
// the index names is never lost to a crash. Past the deadline it records
// nothing and fails with errPastDeadline.
func (u *uploader) record(ctx context.Context, stored []models.StoredObject) error {
	if len(stored) == 0 {
		return nil
	}
	if b, ok := u.objects.(storage.Batcher); ok {
		if err := b.Sync(ctx); err != nil {
			return fmt.Errorf("codestore: %w", err)
		}
	}
	ok, err := u.db.AddStoredObjects(ctx, stored, u.deadline)
	if err == nil && !ok {
		err = errPastDeadline
	}
	return err
}

// errPastDeadline is a publish attempt that outlived its grace: what it
// claimed may be collected, so it records nothing more and starts over.
var errPastDeadline = errors.New("codestore: the publish is past the grace of its claims")

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
