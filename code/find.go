package code

import (
	"context"
	"sort"
	"unicode/utf8"

	"atelier/fault"
	"atelier/models"
	"atelier/storage/codestore"
	"atelier/workspace"
)

// Bounds of quick open: a query is a few characters typed into a box, and
// a list longer than a screen helps nobody.
const (
	MaxFindQuery   = 128 // bytes
	MaxFindResults = 50
	// localFindFiles bounds the walk of a Local project's folder, which is
	// read live on every query rather than indexed.
	localFindFiles = 100_000
)

// ErrQueryTooLong is a quick open query over MaxFindQuery bytes.
var ErrQueryTooLong = fault.New(fault.BadInput, "query_too_long", "code: find query too long", "The search is too long.")

// ErrBadQuery is a quick open query that is not text.
var ErrBadQuery = fault.New(fault.BadInput, "bad_query", "code: find query is not UTF-8", "The search must be text.")

// Found is the answer of quick open.
type Found struct {
	Query   string            `json:"query"`
	Matches []codestore.Match `json:"matches"`
	// Partial says a Local folder had more files than quick open walks, so
	// some were not searched.
	Partial bool `json:"partial,omitempty"`
}

// CheckFindQuery refuses a quick open query that is too long or not text;
// every quick open (the Code page's, an edit session's) asks it first.
func CheckFindQuery(query string) error {
	if len(query) > MaxFindQuery {
		return ErrQueryTooLong
	}
	if !utf8.ValidString(query) {
		return ErrBadQuery
	}
	return nil
}

// Find ranks the project's file paths against query, best first, at most
// limit (MaxFindResults when limit is out of range). A Container project
// answers from the code store's index of its canonical tree; a Local one
// walks its folder, bounded.
func (s *Service) Find(ctx context.Context, p *models.Project, query string, limit int) (Found, error) {
	if err := CheckFindQuery(query); err != nil {
		return Found{}, err
	}
	if limit <= 0 || limit > MaxFindResults {
		limit = MaxFindResults
	}
	var ix *codestore.Index
	var partial bool
	if p.WorkspaceMode == models.ModeLocal {
		var err error
		ix, err = withLocal(s, p, func(l *workspace.LocalFS) (*codestore.Index, error) {
			paths, more, err := walkFiles(ctx, l, localFindFiles)
			partial = more
			return codestore.NewIndex(paths), err
		})
		if err != nil {
			return Found{}, err
		}
	} else {
		src, err := s.source(p)
		if err != nil {
			return Found{}, err
		}
		if ix, err = s.store.Index(ctx, src); err != nil {
			return Found{}, err
		}
	}
	return Found{Query: query, Matches: ix.Find(query, limit), Partial: partial}, nil
}

// walkFiles lists the files of a Local folder, breadth first, up to max;
// more says it stopped early. Folders that cannot be read are passed over,
// as the tree shows them but cannot open them either.
func walkFiles(ctx context.Context, l *workspace.LocalFS, max int) (paths []string, more bool, err error) {
	dirs := []string{""}
	for len(dirs) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		dir := dirs[0]
		dirs = dirs[1:]
		es, err := l.ReadDir(dir)
		if err != nil {
			if dir == "" {
				return nil, false, err
			}
			continue
		}
		for _, e := range es {
			p := e.Name
			if dir != "" {
				p = dir + "/" + e.Name
			}
			switch e.Kind {
			case workspace.KindDir:
				dirs = append(dirs, p)
			case workspace.KindFile:
				if len(paths) == max {
					sort.Strings(paths)
					return paths, true, nil
				}
				paths = append(paths, p)
			}
		}
	}
	sort.Strings(paths)
	return paths, false, nil
}
