package editsession

import (
	"context"

	"atelier/models"
	"atelier/projects"
)

// Seal, in a submit's transaction tx, locks the caller's session id,
// checks that it is theirs and open, and begins its end as submitted: no
// save lands in it from then on, so what tx reads of its edits next is
// what the Change holds. A session already sealed is a *GoneError with
// ReasonSubmitted. Once tx commits, FinishSubmitted ends the rest.
func (s *Sessions) Seal(ctx context.Context, tx *models.Store, acc *projects.Access, id string) (*models.CodeSession, error) {
	cs, err := tx.LockSession(ctx, id)
	if err := ownOpen(cs, err, acc); err != nil {
		return nil, err
	}
	if _, err := tx.BeginEndSession(ctx, id, ReasonSubmitted); err != nil {
		return nil, err
	}
	return cs, nil
}
