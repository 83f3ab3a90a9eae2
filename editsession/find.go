package editsession

import (
	"context"
	"slices"
	"strings"

	"atelier/storage/codestore"
)

// Find ranks the paths of the session's tree against query, best first, at
// most limit: the base tree's index (cached by the code store) without the
// files the session deleted, and the files it added, ranked by the same
// matcher.
func (s *Sessions) Find(ctx context.Context, sess *Session, query string, limit int) ([]codestore.Match, error) {
	if limit <= 0 {
		return nil, nil
	}
	ix, err := s.code.Index(ctx, sess.Source)
	if err != nil {
		return nil, err
	}
	changes, err := s.Changes(ctx, sess)
	if err != nil {
		return nil, err
	}
	var added []string
	deleted := map[string]bool{}
	for _, c := range changes {
		switch c.Status {
		case Added:
			added = append(added, c.Path)
		case Deleted:
			deleted[c.Path] = true
		}
	}
	// Asking for as many more as were deleted keeps limit after dropping them.
	found := ix.Find(query, limit+len(deleted))
	out := slices.DeleteFunc(found, func(m codestore.Match) bool { return deleted[m.Path] })
	if len(added) > 0 {
		slices.Sort(added)
		out = append(out, codestore.NewIndex(added).Find(query, limit)...)
		// The matcher's own order: score, then the shorter path, then path
		// order; a query of no terms lists paths in path order.
		ranked := len(strings.Fields(query)) > 0
		slices.SortStableFunc(out, func(a, b codestore.Match) int {
			if ranked {
				if a.Score != b.Score {
					return b.Score - a.Score
				}
				if len(a.Path) != len(b.Path) {
					return len(a.Path) - len(b.Path)
				}
			}
			return strings.Compare(a.Path, b.Path)
		})
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
