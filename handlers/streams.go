package handlers

import (
	"context"

	"github.com/gin-gonic/gin"

	"atelier/auth"
)

// Holder lets a person hold one more of something (an open stream, a
// running search) or refuses with a fault; release lets it go.
type Holder interface {
	Hold(ctx context.Context, userID int64) (release func(), err error)
}

// HoldStream counts the request against its account's open event streams
// for as long as the handlers after it run, so one account cannot hold the
// servers' descriptors with streams; past the bound it answers 429
// too_many_streams before anything is written. Given the gate of running
// searches, it bounds those the same way (429 too_many_searches).
func HoldStream(streams Holder) func(*gin.Context) error {
	return func(c *gin.Context) error {
		release, err := streams.Hold(c.Request.Context(), auth.User(c).ID)
		if err != nil {
			return err
		}
		defer release()
		c.Next()
		return nil
	}
}
