package code

import (
	"context"

	"atelier/models"
	"atelier/search"
	"atelier/workspace"
)

// Search looks for m's query in the project's files and hands each file
// with matching lines to emit, in path order, as it is found: a Container
// project's canonical tree through git grep, a Local project's folder
// read here, through its root (no symlink followed), at most as many
// files as quick open walks (Partial past them).
func (s *Service) Search(ctx context.Context, p *models.Project, m *search.Matcher, emit func(search.File) error) (search.Summary, error) {
	if p.WorkspaceMode == models.ModeLocal {
		return withLocal(s, p, func(l *workspace.LocalFS) (search.Summary, error) {
			paths, more, err := walkFiles(ctx, l, localFindFiles)
			if err != nil {
				return search.Summary{}, err
			}
			read := func(path string) []byte {
				data, size, err := l.ReadFile(path, search.MaxFileBytes+1)
				if err != nil || size > search.MaxFileBytes {
					return nil // unreadable (a FIFO, gone meanwhile) or too large: passed over
				}
				return data
			}
			sum, err := search.Run(ctx, m, search.Files(paths, read), emit)
			sum.Partial = more
			return sum, err
		})
	}
	src, err := s.source(p)
	if err != nil {
		return search.Summary{}, err
	}
	return search.Run(ctx, m, search.Git(s.git, s.store, src, nil, nil), emit)
}
