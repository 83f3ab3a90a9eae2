package sandbox_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"atelier/internal/txwatch"
	"atelier/sandbox"
	"atelier/testrig/txwatchtest"
)

// A sandbox's run and kill note themselves to a watch, so a test sees one
// made while a transaction of its request is open.
func TestRunAndKillNoteThemselves(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	ctx, w := txwatchtest.Attach(context.Background())
	end := txwatch.Begin(ctx)
	if _, err := sb.Run(ctx, s.spec("true"), sandbox.Limits{Timeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := sb.KillAll(ctx, s.uid); err != nil {
		t.Fatal(err)
	}
	end()
	if got, want := w.InTx(), []string{"sandbox run", "sandbox kill"}; !slices.Equal(got, want) {
		t.Errorf("noted inside the transaction %q, want %q", got, want)
	}
}
