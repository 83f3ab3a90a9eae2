package codestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"atelier/models"
)

// The collector deletes the objects no live tree needs, by mark and sweep.
//
// Live trees are the published commits the database still names after
// models.UnpublishDead: every project's canonical commit, the bases of
// sessions not yet closed, the bases and commits of Changes on their way,
// and whatever was published within the grace. A pass, run by one
// instance at a time (a session advisory lock, every statement on the
// connection that holds it):
//
//  1. finishes the deletions an interrupted pass left (gc_doomed);
//  2. takes the database's clock S and sets cutoff = S - grace;
//  3. unpublishes dead commits published before cutoff;
//  4. marks (gc_marks, in PostgreSQL, so memory holds a walk's stack and
//     one tree, whatever the trees' size) every key below every published
//     root, reading trees from the object store, each tree once; a live
//     tree it cannot read stops the pass before anything is deleted;
//  5. sweeps trees: unmarked ones used before cutoff;
//  6. walks every tree still unmarked, now all used since cutoff, and marks
//     what is below it;
//  7. sweeps blobs and path indexes the same way.
//
// Sweeping a batch is two steps. The rows go first, in one statement that
// checks each row again under its lock (still unmarked, still used before
// cutoff) and lists it in gc_doomed; then, under the deletion lock (an
// advisory lock of the collector's connection, no transaction open, so a
// slow store holds no row and no pooled connection), those still listed
// are deleted from the store and their rows dropped. A crash in between
// leaves objects without rows, which the next pass finishes; never a row
// without its object.
//
// Why a publish in flight loses nothing (publish.go):
//
//   - A publish claims what it finds stored (used_at = now, under the
//     row's lock, in key order as the sweep locks them). A claim before the
//     sweep's statement makes the row young, and the sweep keeps it; after
//     it, the row is gone and the publish stores the object itself.
//   - Before uploading a key it lacks, a publish removes the key's
//     gc_doomed row, and when there is one it first waits for the deletion
//     lock, so for a sweep deleting that object right now; a sweep reads
//     which keys are still listed once it holds the lock: an upload never
//     lands before a deletion of the same key.
//   - A publish trusts a claimed tree's blobs without claiming them. Every
//     tree that exists when step 6 starts is marked or walked there: an
//     unmarked tree used before cutoff was a candidate of step 5, so it is
//     gone or was claimed meanwhile. Blobs are swept only after that.
//   - A tree recorded after step 6 started was recorded by a publish within
//     three quarters of the grace after its first claim, so its blobs were
//     claimed or stored since a time after this pass's cutoff, and no sweep
//     of this pass takes them. A publish past that deadline records nothing
//     and starts over, claiming afresh.
//
// So the grace is also the longest a publish may take between its first
// claim and its last record; every instance must use the same.

// collectorLock is the advisory lock a collection holds ("gc").
const collectorLock = 0x6763

// sweepBatch is how many objects one sweep statement takes, and how many
// deletions run under one hold of the deletion lock.
const sweepBatch = 500

// parallelDeletes is how many deletions from the store run at once.
const parallelDeletes = 8

// collectEvery is how often the collector runs when nothing asks sooner.
const collectEvery = 15 * time.Minute

// CollectStats says what one collection did.
type CollectStats struct {
	Unpublished int   // dead commits unpublished
	Marked      int64 // keys a live tree names
	Objects     int   // objects deleted from the store
	Bytes       int64 // their size
	// Due is when a next pass may free something more (the oldest object
	// that was spared only for its age comes of age); zero when nothing
	// was spared.
	Due time.Time
}

// ErrCollecting is a collection while another instance runs one.
var ErrCollecting = errors.New("codestore: another collection is running")

// Collect runs one collection pass, or returns ErrCollecting at once when
// another instance holds the collector's lock.
func (s *Store) Collect(ctx context.Context) (CollectStats, error) {
	var st CollectStats
	err := s.db.Exclusive(ctx, collectorLock, func(db *models.Store) error {
		return s.collectPass(ctx, db, &st)
	})
	if errors.Is(err, models.ErrLockHeld) {
		return st, ErrCollecting
	}
	return st, err
}

// CollectSoon asks the collector's loop (KeepCollected) for a pass now,
// such as after a project was deleted. It never blocks.
func (s *Store) CollectSoon() {
	select {
	case s.collect <- struct{}{}:
	default:
	}
}

// KeepCollected collects every collectEvery, when CollectSoon asks, and
// when the objects a pass spared for their age come of age, until ctx
// ends.
func (s *Store) KeepCollected(ctx context.Context) {
	for {
		wait := collectEvery
		st, err := s.Collect(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, ErrCollecting):
			s.log.Warn("codestore: collection failed", "err", err)
		case err == nil && (st.Objects > 0 || st.Unpublished > 0):
			s.log.Info("codestore: storage collected", "objects", st.Objects, "bytes", st.Bytes,
				"unpublished", st.Unpublished, "marked", st.Marked)
		}
		if !st.Due.IsZero() {
			// A little past the age, so the pass finds it old enough.
			wait = min(wait, time.Until(st.Due)+time.Second)
		}
		t := time.NewTimer(max(wait, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.collect:
			t.Stop()
		}
	}
}

func (s *Store) collectPass(ctx context.Context, db *models.Store, st *CollectStats) error {
	if err := s.finishDoomed(ctx, db, st); err != nil {
		return err
	}
	start, err := db.Now(ctx)
	if err != nil {
		return err
	}
	cutoff := start.Add(-s.opts.Grace)
	dead, err := db.UnpublishDead(ctx, cutoff)
	if err != nil {
		return err
	}
	st.Unpublished = len(dead)
	for _, c := range dead {
		s.roots.Delete(c)
	}
	if err := db.ResetMarks(ctx); err != nil {
		return err
	}
	// The marks are only this pass's: the next one starts afresh.
	defer db.ResetMarks(context.WithoutCancel(ctx))
	if err := s.markPublished(ctx, db, st); err != nil {
		return err
	}
	if err := s.sweep(ctx, db, "trees/", cutoff, st); err != nil {
		return err
	}
	if err := s.markYoungTrees(ctx, db, cutoff, st); err != nil {
		return err
	}
	for _, kind := range []string{"blobs/", "indexes/"} {
		if err := s.sweep(ctx, db, kind, cutoff, st); err != nil {
			return err
		}
	}
	oldest, err := db.OldestSpared(ctx, cutoff)
	if err != nil {
		return err
	}
	if oldest != nil {
		// By the database's clock; the loop waits by this one.
		st.Due = time.Now().Add(oldest.Add(s.opts.Grace).Sub(start))
	}
	return nil
}

// markPublished marks every key below every published root, and the
// roots' path indexes. A tree it cannot read stops the pass.
func (s *Store) markPublished(ctx context.Context, db *models.Store, st *CollectStats) error {
	after := ""
	for {
		pcs, err := db.PublishedRootsAfter(ctx, after, sweepBatch)
		if err != nil || len(pcs) == 0 {
			return err
		}
		after = pcs[len(pcs)-1].CommitSHA
		keys := make([]string, 0, 2*len(pcs))
		for _, pc := range pcs {
			keys = append(keys, treeKey(pc.RootTree), indexKey(pc.RootTree))
		}
		if err := s.markFrom(ctx, db, keys, true, st); err != nil {
			return err
		}
	}
}

// markYoungTrees walks every tree still unmarked, all of them used since
// cutoff once the trees are swept; a tree below one that is missing is
// skipped (no publish trusts a tree it has not claimed).
func (s *Store) markYoungTrees(ctx context.Context, db *models.Store, cutoff time.Time, st *CollectStats) error {
	after := "trees/" // the index is read from the kind's first key on
	for {
		keys, err := db.Unmarked(ctx, "trees/", after, cutoff, true, sweepBatch)
		if err != nil || len(keys) == 0 {
			return err
		}
		after = keys[len(keys)-1]
		if err := s.markFrom(ctx, db, keys, false, st); err != nil {
			return err
		}
	}
}

// markFrom marks keys and, depth first, everything below the trees among
// them that were not marked yet. Memory holds the stack of trees to visit
// and one tree at a time; the marks are in the database. strict makes a
// tree that cannot be read an error; else a missing one is skipped.
func (s *Store) markFrom(ctx context.Context, db *models.Store, keys []string, strict bool, st *CollectStats) error {
	fresh, err := db.Mark(ctx, keys)
	if err != nil {
		return err
	}
	st.Marked += int64(len(fresh))
	var stack []string
	push := func(keys []string) {
		for _, k := range keys {
			if sha, ok := strings.CutPrefix(k, "trees/"); ok {
				stack = append(stack, sha)
			}
		}
	}
	push(fresh)
	for len(stack) > 0 {
		sha := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		es, err := s.readTree(ctx, sha, false)
		if err != nil {
			if !strict && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("codestore: collect: a live tree cannot be read, nothing is swept: %w", err)
		}
		children := make([]string, 0, len(es))
		for _, e := range es {
			switch e.Kind {
			case KindDir:
				children = append(children, treeKey(e.SHA))
			case KindFile, KindSymlink:
				children = append(children, blobKey(e.SHA))
			}
		}
		if fresh, err = db.Mark(ctx, children); err != nil {
			return err
		}
		st.Marked += int64(len(fresh))
		push(fresh)
	}
	return nil
}

// sweep deletes the unmarked objects of a kind used before cutoff.
func (s *Store) sweep(ctx context.Context, db *models.Store, kind string, cutoff time.Time, st *CollectStats) error {
	after := kind // the index is read from the kind's first key on
	for {
		keys, err := db.Unmarked(ctx, kind, after, cutoff, false, sweepBatch)
		if err != nil || len(keys) == 0 {
			return err
		}
		after = keys[len(keys)-1]
		doomed, err := db.Doom(ctx, keys, cutoff)
		if err != nil {
			return err
		}
		if err := s.deleteDoomed(ctx, db, doomed, st); err != nil {
			return err
		}
	}
}

// finishDoomed deletes what an interrupted pass left listed as doomed.
func (s *Store) finishDoomed(ctx context.Context, db *models.Store, st *CollectStats) error {
	after := ""
	for {
		doomed, err := db.DoomedAfter(ctx, after, sweepBatch)
		if err != nil || len(doomed) == 0 {
			return err
		}
		after = doomed[len(doomed)-1].Key
		if err := s.deleteDoomed(ctx, db, doomed, st); err != nil {
			return err
		}
	}
}

// deleteDoomed deletes objects listed in gc_doomed from the store, with
// no transaction open but under the lock a publish waits for before it
// takes a key off the list (models.DeleteDoomed), and drops the rows of
// those it deleted; a publish that took a key off the list before keeps
// its object. An object that could not be deleted stays listed for the
// next pass.
func (s *Store) deleteDoomed(ctx context.Context, db *models.Store, doomed []models.StoredObject, st *CollectStats) error {
	if len(doomed) == 0 {
		return nil
	}
	keys := make([]string, len(doomed))
	for i, o := range doomed {
		keys[i] = o.Key
	}
	var failed error
	err := db.DeleteDoomed(ctx, keys, func(listed []models.StoredObject) []string {
		var deleted []string
		deleted, failed = s.deleteObjects(ctx, listed, st)
		return deleted
	})
	if err != nil {
		return err
	}
	return failed
}

// deleteObjects deletes objects from the store, a few at once, and
// returns the keys it deleted and the first failure; it stops starting
// deletions after a failure.
func (s *Store) deleteObjects(ctx context.Context, objs []models.StoredObject, st *CollectStats) ([]string, error) {
	var (
		mu      sync.Mutex
		deleted []string
		first   error
		wg      sync.WaitGroup
	)
	slots := make(chan struct{}, parallelDeletes)
	for _, o := range objs {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			err := s.objects.Delete(ctx, o.Key)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("codestore: collect: %w", err)
				}
				return
			}
			deleted = append(deleted, o.Key)
			st.Objects++
			st.Bytes += o.Size
		}()
	}
	wg.Wait()
	return deleted, first
}
