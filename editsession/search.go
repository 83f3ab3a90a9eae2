package editsession

import (
	"context"
	"errors"
	"slices"
	"strings"

	"atelier/models"
	"atelier/search"
)

// Search looks for m's query in the session's tree, as the session sees
// it, and hands each file with matching lines to emit in path order: the
// base commit through git grep without the paths the session changed, and
// the session's own text of the files it edited or added, read from its
// edits one at a time; deleted files are not searched.
func (s *Sessions) Search(ctx context.Context, sess *Session, m *search.Matcher, emit func(search.File) error) (search.Summary, error) {
	edits, err := s.db.SessionPaths(ctx, sess.ID)
	if err != nil {
		return search.Summary{}, err
	}
	changed := make(map[string]bool, len(edits))
	var extra []search.File
	for _, e := range edits {
		changed[e.Path] = true
		if e.Deleted {
			continue
		}
		f, err := s.db.SessionFile(ctx, sess.ID, e.Path)
		if errors.Is(err, models.ErrNotFound) {
			delete(changed, e.Path) // reverted meanwhile: the base's text is the session's
			continue
		}
		if err != nil {
			return search.Summary{}, err
		}
		if found, ok := m.Text(e.Path, f.Content); ok {
			extra = append(extra, found)
		}
	}
	// git's order, byte by byte; the database's collation may differ.
	slices.SortFunc(extra, func(a, b search.File) int { return strings.Compare(a.Path, b.Path) })
	return search.Run(ctx, m, search.Git(s.git, s.code, sess.Source, func(p string) bool { return changed[p] }, extra), emit)
}
