package server

import (
	"context"
	"log/slog"
	"time"

	"atelier/limits"
	"atelier/models"
)

// accountStreams bounds a person's open event streams on every instance
// together: this instance's gate first, which costs nothing and keeps a
// flood from one account off the database, then a row per stream in the
// database, counted with the live instances' rows.
type accountStreams struct {
	local    *limits.Gate[int64]
	db       *models.Store
	instance string
	now      func() time.Time
	log      *slog.Logger
}

// closeWait bounds the forgetting of a stream that ended; a row left
// behind counts until its instance stops.
const closeWait = 5 * time.Second

func (s *accountStreams) Hold(ctx context.Context, userID int64) (func(), error) {
	release, err := s.local.Enter(userID)
	if err != nil {
		return nil, err
	}
	id, held, err := s.db.OpenStream(ctx, userID, s.instance, limits.StreamsPerAccount, s.now())
	if err == nil && !held {
		err = limits.ErrStreams
	}
	if err != nil {
		release()
		return nil, err
	}
	return func() {
		defer release()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeWait)
		defer cancel()
		if err := s.db.CloseStream(ctx, id); err != nil {
			s.log.Warn("an ended stream still counts against its account until this instance stops", "err", err)
		}
	}, nil
}
