package codestore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"atelier/gitsvc"
	"atelier/models"
)

// indexKey is where the flat path index of a root tree lives, next to the
// tree objects and, like them, named by the tree: a tree's paths never
// change, so any instance may read it and no restart loses it.
func indexKey(root string) string { return "indexes/" + root }

// encodeIndex joins paths with NUL, the one byte a git path cannot hold.
func encodeIndex(paths []string) []byte { return []byte(strings.Join(paths, "\x00")) }

func decodeIndex(b []byte) []string {
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(string(b), "\x00")
}

// filePaths is every file of a recursive listing, sorted: what quick open
// can open (folders, links and submodules are not files to view).
func filePaths(all []gitsvc.Entry) []string {
	paths := make([]string, 0, len(all))
	for _, g := range all {
		if kindOf(g.Mode) == KindFile {
			paths = append(paths, g.Path)
		}
	}
	sort.Strings(paths)
	return paths
}

// putIndex stores the index of root, unless the index of the object store
// has it (which it claims), and records it as stored, before deadline
// (errPastDeadline); see Publish.
func (s *Store) putIndex(ctx context.Context, root string, paths []string, deadline time.Time) error {
	key := indexKey(root)
	have, err := s.db.ClaimStoredObjects(ctx, []string{key})
	if err != nil || have[key] {
		return err
	}
	if err := s.db.ClearDoomed(ctx, []string{key}); err != nil {
		return err
	}
	data := encodeIndex(paths)
	if err := s.objects.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("codestore: store %s: %w", key, err)
	}
	ok, err := s.db.AddStoredObjects(ctx, []models.StoredObject{{Key: key, Size: int64(len(data))}}, deadline)
	if err == nil && !ok {
		err = errPastDeadline
	}
	return err
}

// Index returns the flat path index of the source's tree: from memory,
// else the object store, else built from one git listing (and then stored
// for the next reader). A commit published before indexes existed is
// indexed on its first quick open.
func (s *Store) Index(ctx context.Context, src Source) (*Index, error) {
	// Commits are immutable too: an unpublished one's index is found
	// again by its commit without asking git for its root.
	if ix, ok := s.indexes.Get(src.Commit); ok {
		return ix, nil
	}
	root, published := s.publishedRoot(ctx, src.Commit)
	if published {
		if ix, ok := s.indexes.Get(root); ok {
			return ix, nil
		}
		if ix, err := s.loadIndex(ctx, root); err == nil {
			s.indexes.Add(root, ix)
			return ix, nil
		}
	}
	root, all, err := s.git.ListAll(ctx, src.Repo, src.Commit)
	if err != nil {
		return nil, fmt.Errorf("codestore: index %s: %w", src.Commit, err)
	}
	if ix, ok := s.indexes.Get(root); ok {
		s.indexes.Add(src.Commit, ix)
		return ix, nil
	}
	paths := filePaths(all)
	if err := s.storeIndex(ctx, root, paths); err != nil {
		s.log.Warn("codestore: index not stored; it is built again on the next start", "root", root, "err", err)
	}
	ix := NewIndex(paths)
	s.indexes.Add(root, ix)
	s.indexes.Add(src.Commit, ix)
	return ix, nil
}

// storeIndex is putIndex on its own, outside a publish.
func (s *Store) storeIndex(ctx context.Context, root string, paths []string) error {
	began, err := s.db.Now(ctx)
	if err != nil {
		return err
	}
	return s.putIndex(ctx, root, paths, began.Add(s.opts.Grace*3/4))
}

func (s *Store) loadIndex(ctx context.Context, root string) (*Index, error) {
	ctx, cancel := context.WithTimeout(ctx, objectTimeout)
	defer cancel()
	rc, err := s.objects.Get(ctx, indexKey(root))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("codestore: index %s: %w", root, err)
	}
	return NewIndex(decodeIndex(b)), nil
}
