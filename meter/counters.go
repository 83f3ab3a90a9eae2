package meter

import (
	"context"
	"fmt"

	"atelier/models"
)

// Counters returns this month's counter of every project that reserved
// sandbox time in it: what monitoring scrapes.
func (m *Meter) Counters(ctx context.Context) ([]models.SandboxCounter, error) {
	cs, err := m.db.SandboxCountersOf(ctx, MonthOf(m.now()), m.defaultCap)
	if err != nil {
		return nil, fmt.Errorf("meter: counters: %w", err)
	}
	return cs, nil
}
