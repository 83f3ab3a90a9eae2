package models

import (
	"context"
	"fmt"
	"time"
)

// OpenStream records that the person opened an event stream on instance,
// unless they hold max already on this instance and the live ones
// together; held says which. The person's user row stays locked until the
// row is written, so two openings through any instances cannot both take
// the last place.
func (s *Store) OpenStream(ctx context.Context, userID int64, instance string, max int, now time.Time) (id int64, held bool, err error) {
	err = s.Tx(ctx, func(tx *Store) error {
		db := tx.db.WithContext(ctx)
		var locked []int64
		if err := db.Raw(`SELECT id FROM users WHERE id = ? FOR NO KEY UPDATE`, userID).Scan(&locked).Error; err != nil {
			return err
		}
		if len(locked) == 0 {
			return ErrNotFound
		}
		var n int
		if err := db.Raw(`SELECT count(*) FROM open_streams WHERE user_id = ? AND (instance = ? OR instance IN (`+liveInstances+`))`,
			userID, instance).Scan(&n).Error; err != nil {
			return err
		}
		if n >= max {
			return nil
		}
		held = true
		return db.Raw(`INSERT INTO open_streams (user_id, instance, opened_at) VALUES (?, ?, ?) RETURNING id`,
			userID, instance, now).Scan(&id).Error
	})
	if err != nil {
		return 0, false, fmt.Errorf("models: open a stream of user %d: %w", userID, translate(err))
	}
	return id, held, nil
}

// CloseStream forgets the open stream id.
func (s *Store) CloseStream(ctx context.Context, id int64) error {
	if err := s.db.WithContext(ctx).Exec(`DELETE FROM open_streams WHERE id = ?`, id).Error; err != nil {
		return fmt.Errorf("models: close stream %d: %w", id, translate(err))
	}
	return nil
}
