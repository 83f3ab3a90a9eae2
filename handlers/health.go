package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Health answers load balancers and the person who just ran `go run .`.
type Health struct {
	Ping func(context.Context) error
}

// Show is 200 when the database answers within two seconds, else 503.
func (h *Health) Show(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	if err := h.Ping(ctx); err != nil {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "error": "database does not answer", "reason": "database"})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}
