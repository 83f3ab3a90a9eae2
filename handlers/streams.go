package handlers

import (
	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/limits"
)

// HoldStream counts the request against its account's open event streams
// for as long as the handlers after it run, so one account cannot hold the
// server's descriptors with streams; past the bound it answers 429
// too_many_streams before anything is written. Given the gate of running
// searches, it bounds those the same way (429 too_many_searches).
func HoldStream(streams *limits.Gate[int64]) func(*gin.Context) error {
	return func(c *gin.Context) error {
		release, err := streams.Enter(auth.User(c).ID)
		if err != nil {
			return err
		}
		defer release()
		c.Next()
		return nil
	}
}
