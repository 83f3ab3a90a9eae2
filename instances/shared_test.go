package instances_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"atelier/instances"
)

// sharing is an instance of its own place that checks the shared folder,
// with a quick pace so a wait for a heartbeat ends soon.
func (w *world) sharing(t *testing.T, id, shared string, goneAfter time.Duration) *instances.Instance {
	t.Helper()
	in := instances.New(instances.Options{DB: w.db, Meter: w.meter, ID: id, Place: "host:" + id,
		PlaceLock: filepath.Join(t.TempDir(), "instance.lock"), Shared: shared, Every: 50 * time.Millisecond, GoneAfter: goneAfter,
		Now: w.clock.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { in.Stop(context.Background()) })
	return in
}

func probes(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Instances on one database start only on the same data folder: a second
// one there starts, one given another folder is refused before it is
// recorded, and leaves nothing behind; stopped instances take their probes
// with them.
func TestInstancesShareOneDataFolder(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	shared, elsewhere := t.TempDir(), t.TempDir()
	a, b := w.sharing(t, "a", shared, time.Second), w.sharing(t, "b", shared, time.Second)
	if _, err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx); err != nil {
		t.Fatalf("an instance on the same folder: %v", err)
	}
	c := w.sharing(t, "c", elsewhere, time.Second)
	if _, err := c.Start(ctx); !errors.Is(err, instances.ErrNotShared) {
		t.Fatalf("an instance on another folder: %v, want ErrNotShared", err)
	}
	beats, err := w.db.InstanceBeats(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, recorded := beats["c"]; recorded || len(beats) != 2 {
		t.Fatalf("live instances after the refusal: %v", beats)
	}
	if left := probes(t, elsewhere); len(left) != 0 {
		t.Fatalf("the refused instance left %v", left)
	}
	if got := probes(t, shared); !slices.Equal(got, []string{"a.probe", "b.probe"}) {
		t.Fatalf("probes of the live instances: %v", got)
	}
	a.Stop(ctx)
	b.Stop(ctx)
	if left := probes(t, shared); len(left) != 0 {
		t.Fatalf("stopped instances left %v", left)
	}
}

// A folder that does not carry locks between instances is found: a live
// instance's probe is there but unlocked, and its heartbeat goes on, so
// the start is refused. Had it not beaten, it would be an instance that
// died, and the start goes on once it has waited GoneAfter.
func TestAFolderThatDropsLocksIsRefused(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	shared := t.TempDir()
	a := w.sharing(t, "a", shared, time.Second)
	if _, err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.LoseProbeLock(); err != nil {
		t.Fatal(err)
	}
	beating, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beating)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				w.clock.Add(time.Millisecond)
				a.Beat(ctx)
			}
		}
	}()
	b := w.sharing(t, "b", shared, 5*time.Second)
	_, err := b.Start(ctx)
	close(stop)
	<-beating
	if !errors.Is(err, instances.ErrLocksNotShared) {
		t.Fatalf("a start beside a live instance whose lock is not seen: %v, want ErrLocksNotShared", err)
	}

	// Now a stays silent: a crash not yet noticed.
	c := w.sharing(t, "c", shared, 300*time.Millisecond)
	if _, err := c.Start(ctx); err != nil {
		t.Fatalf("a start beside an instance that died: %v", err)
	}
}
