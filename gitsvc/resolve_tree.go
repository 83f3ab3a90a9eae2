package gitsvc

import "context"

// ResolveTree returns the full hash of the tree of the commit rev names, or
// ErrNotFound.
func (s *Service) ResolveTree(ctx context.Context, r *Repo, rev string) (string, error) {
	if err := checkValue(rev); err != nil {
		return "", err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return "", err
	}
	defer release()
	return s.resolve(ctx, r, rev+"^{commit}^{tree}")
}
