package instances_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/instances"
	"atelier/meter"
	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// world is one database with a project and an open session on it.
type world struct {
	db      *models.Store
	meter   *meter.Meter
	project int64
	session string
	clock   *clock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	db := dbtest.Store(t)
	ctx := context.Background()
	u := &models.User{Username: "owner", PasswordHash: "x"}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	p := &models.Project{Name: "p", WorkspaceDirName: "p", WorkspaceMode: models.ModeContainer}
	if err := db.CreateProject(ctx, p, u.ID); err != nil {
		t.Fatal(err)
	}
	c := &clock{now: t0}
	cs := &models.CodeSession{ID: "edit_0123456789abcdef0123456789abcdef", ProjectID: p.ID, UserID: u.ID, BaseCommit: "0000000000000000000000000000000000000000",
		State: models.SessionOpen, OpenedAt: t0, LastSeenAt: t0}
	if err := db.Exec(ctx, "INSERT INTO code_sessions (id, project_id, user_id, base_commit, state, opened_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
		cs.ID, cs.ProjectID, cs.UserID, cs.BaseCommit, cs.State, cs.OpenedAt, cs.LastSeenAt); err != nil {
		t.Fatal(err)
	}
	return &world{db: db, meter: meter.New(db, meter.DefaultCap, c.Now), project: p.ID, session: cs.ID, clock: c}
}

func (w *world) instance(t *testing.T, id, place string) *instances.Instance {
	t.Helper()
	in := instances.New(instances.Options{DB: w.db, Meter: w.meter, ID: id, Place: place,
		PlaceLock: filepath.Join(t.TempDir(), "instance.lock"), Now: w.clock.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { in.Stop(context.Background()) })
	return in
}

func (w *world) reserved(t *testing.T) int64 {
	t.Helper()
	u, err := w.meter.Usage(context.Background(), w.project)
	if err != nil {
		t.Fatal(err)
	}
	return u.Reserved
}

// An instance whose heartbeat comes too late is declared gone by another
// one's beat: its reservations are settled once and the session it held is
// free; until then both are its own. A late instance that was alive after
// all records itself live again.
func TestALateInstanceIsGoneOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	a, b := w.instance(t, "a", "host-a:/area"), w.instance(t, "b", "host-b:/area")
	for _, in := range []*instances.Instance{a, b} {
		if gone, err := in.Start(ctx); err != nil || len(gone) != 0 {
			t.Fatalf("Start = %v, %v", gone, err)
		}
	}
	if _, err := w.meter.Reserve(ctx, w.project, "a"); err != nil {
		t.Fatal(err)
	}
	if err := w.db.ClaimSessionRuntime(ctx, w.session, "a"); err != nil {
		t.Fatal(err)
	}
	if err := w.db.ClaimSessionRuntime(ctx, w.session, "b"); !errors.Is(err, models.ErrRuntimeElsewhere) {
		t.Fatalf("b claimed a live instance's session: %v", err)
	}
	// a runs a Change's check, its claim good for a long while.
	zeros := strings.Repeat("0", 40)
	if err := w.db.Exec(ctx, `INSERT INTO changes (project_id, message, base_commit, commit_sha, paths, status, check_due, claimed_by, claimed_until)
		VALUES (?, 'm', ?, ?, '["a"]', 'verifying', ?, 'a', ?)`, w.project, zeros, zeros, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	// a beats no more; 10 s on, b's beat still counts it live.
	w.clock.Add(10 * time.Second)
	b.Beat(ctx)
	if got := w.reserved(t); got != meter.Chunk {
		t.Fatalf("a's reservation settled while a was only 10 s late: %d reserved", got)
	}
	w.clock.Add(10 * time.Second)
	b.Beat(ctx)
	if got := w.reserved(t); got != 0 {
		t.Fatalf("a's reservation still held 20 s after its last beat: %d reserved", got)
	}
	used := usedOf(t, w)
	b.Beat(ctx)
	if again := usedOf(t, w); again != used {
		t.Fatalf("a's reservation was charged again: %d then %d", used, again)
	}
	if err := w.db.ClaimSessionRuntime(ctx, w.session, "b"); err != nil {
		t.Fatalf("the gone instance's session is not free: %v", err)
	}
	if claim, err := w.db.ClaimCheck(ctx, "b", w.clock.Now(), time.Minute); err != nil || claim == nil {
		t.Fatalf("the gone instance's check is not free for another verifier: %v, %v", claim, err)
	}

	// a was alive after all: it says so and lives on, holding nothing.
	a.Beat(ctx)
	if err := w.db.ClaimSessionRuntime(ctx, w.session, "a"); !errors.Is(err, models.ErrRuntimeElsewhere) {
		t.Fatalf("the revived instance took back a session b holds: %v", err)
	}
}

func usedOf(t *testing.T, w *world) int64 {
	t.Helper()
	u, err := w.meter.Usage(context.Background(), w.project)
	if err != nil {
		t.Fatal(err)
	}
	return u.Used
}

// One live instance per place: a second process on a place another holds
// is refused, and the next process of a place whose instance ended takes
// it over and learns which instances it replaces.
func TestOneInstancePerPlace(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	lock := filepath.Join(t.TempDir(), "area", "instance.lock")
	mk := func(id string) *instances.Instance {
		return instances.New(instances.Options{DB: w.db, Meter: w.meter, ID: id, Place: "host:/area", PlaceLock: lock,
			Now: w.clock.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	first := mk("first")
	if _, err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	second := mk("second")
	if _, err := second.Start(ctx); !errors.Is(err, instances.ErrPlaceTaken) {
		t.Fatalf("a second process on a held place: %v", err)
	}
	// The first dies without stopping: its lock goes with the process
	// (here: its file), its row stays live.
	if err := w.db.ClaimSessionRuntime(ctx, w.session, "first"); err != nil {
		t.Fatal(err)
	}
	first.Stop(ctx)
	if err := w.db.Exec(ctx, "UPDATE instances SET stopped_at = NULL WHERE id = 'first'"); err != nil {
		t.Fatal(err)
	}
	if err := w.db.ClaimSessionRuntime(ctx, w.session, "first"); err != nil {
		t.Fatal(err)
	}
	gone, err := second.Start(ctx)
	if err != nil || fmt.Sprint(gone) != "[first]" {
		t.Fatalf("the next process's Start = %v, %v; want first gone", gone, err)
	}
	defer second.Stop(ctx)
	left, err := w.db.SessionsLeftBy(ctx, gone)
	if err != nil || len(left) != 1 || left[0].ID != w.session {
		t.Fatalf("sessions left by the gone instance: %v, %v", left, err)
	}
	if left, err := w.db.SessionsLeftBy(ctx, nil); err != nil || len(left) != 0 {
		t.Fatalf("a session held by a recorded instance counted as nobody's: %v, %v", left, err)
	}
}
