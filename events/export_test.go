package events

import (
	"log/slog"
	"time"

	"atelier/models"
)

// NewBeating is New with a heartbeat every beat, so a test need not wait
// for the real one.
func NewBeating(db *models.Store, log *slog.Logger, beat time.Duration) *Recorder {
	return newRecorder(db, log, beat)
}
