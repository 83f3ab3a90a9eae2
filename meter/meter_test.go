package meter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"atelier/meter"
	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is the meter's injected time; tests move it by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// t0 is mid-month, so that only the test about months crosses one.
var t0 = time.Date(2026, time.March, 10, 9, 0, 0, 0, time.UTC)

func sec(n int) time.Duration { return time.Duration(n) * time.Second }

// newProjects makes a store with n projects and returns their ids.
func newProjects(t *testing.T, n int) (*models.Store, []int64) {
	t.Helper()
	s := dbtest.Store(t)
	ctx := context.Background()
	u := &models.User{Username: "owner", PasswordHash: "x"}
	if err := s.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, n)
	for i := range ids {
		p := &models.Project{Name: fmt.Sprintf("p%d", i), WorkspaceDirName: fmt.Sprintf("p%d", i), WorkspaceMode: models.ModeContainer}
		if err := s.CreateProject(ctx, p, u.ID); err != nil {
			t.Fatal(err)
		}
		ids[i] = p.ID
	}
	return s, ids
}

func setCap(t *testing.T, s *models.Store, projectID, seconds int64) {
	t.Helper()
	if err := s.SetSandboxCap(context.Background(), projectID, &seconds); err != nil {
		t.Fatal(err)
	}
}

func usage(t *testing.T, m *meter.Meter, projectID int64) meter.Usage {
	t.Helper()
	u, err := m.Usage(context.Background(), projectID)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func reserve(t *testing.T, m *meter.Meter, projectID int64, instance string) *meter.Reservation {
	t.Helper()
	r, err := m.Reserve(context.Background(), projectID, instance)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return r
}

func settle(t *testing.T, m *meter.Meter, r *meter.Reservation, start, end time.Time) int64 {
	t.Helper()
	charged, err := m.Settle(context.Background(), r, start, end)
	if err != nil {
		t.Fatalf("settle: %v", err)
	}
	return charged
}

// Reservations race for the last room under the cap. Only the single
// conditional UPDATE decides, so exactly the cap's worth of them win, however
// the 200 interleave over the pool's connections.
func TestConcurrentReservationsStopAtTheCap(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	const room = 100
	m := meter.New(s, room*meter.Chunk, newClock(t0).Now)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		won     int
		refused int
		other   []error
	)
	start := make(chan struct{})
	for range 2 * room {
		wg.Go(func() {
			<-start
			_, err := m.Reserve(context.Background(), p, "web-1")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, meter.ErrCap):
				refused++
			default:
				other = append(other, err)
			}
		})
	}
	close(start)
	wg.Wait()

	if len(other) > 0 {
		t.Fatalf("%d reservations failed otherwise, first: %v", len(other), other[0])
	}
	if won != room || refused != room {
		t.Fatalf("%d reserved and %d refused, want %d and %d", won, refused, room, room)
	}
	u := usage(t, m, p)
	if u.Used+u.Reserved > u.Cap || u.Reserved != room*meter.Chunk || u.Used != 0 {
		t.Fatalf("usage %+v: want %d reserved of a cap of %d", u, room*meter.Chunk, u.Cap)
	}
	// The counter agrees with the rows it sums.
	rs, err := s.SandboxReservationsOfGone(context.Background()) // no instance lives: all of them
	if err != nil {
		t.Fatal(err)
	}
	var held int64
	for _, r := range rs {
		held += r.Seconds
	}
	if len(rs) != room || held != u.Reserved {
		t.Fatalf("%d reservation rows holding %d s; the counter says %d s", len(rs), held, u.Reserved)
	}
}

// A second command inside the first one's idle tail pays only the awake time
// it adds; one after the tail ran out pays its run and a whole tail again.
func TestOverlappingTailsArePaidOnce(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	c := newClock(t0)
	m := meter.New(s, meter.DefaultCap, c.Now)

	steps := []struct {
		name       string
		start, end time.Time
		want       int64
	}{
		// awake [0 s, 130 s]
		{"first", t0, t0.Add(sec(10)), 130},
		// [30 s, 160 s]: 130 s to 160 s is new
		{"inside the tail", t0.Add(sec(30)), t0.Add(sec(40)), 30},
		// the tail ended at 160 s
		{"after the tail", t0.Add(sec(300)), t0.Add(sec(310)), 130},
	}
	var total int64
	for _, st := range steps {
		c.Set(st.start)
		r := reserve(t, m, p, "web-1")
		if got := settle(t, m, r, st.start, st.end); got != st.want {
			t.Errorf("%s: charged %d s, want %d", st.name, got, st.want)
		}
		total += st.want
	}
	u := usage(t, m, p)
	if u.Used != total || u.Reserved != 0 {
		t.Fatalf("usage %+v: want %d used and nothing reserved", u, total)
	}
}

// A command that took no time still kept the Sandbox awake for its tail,
// once; a second settlement of the same reservation charges nothing more.
func TestZeroRunPaysTheTailOnce(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	m := meter.New(s, meter.DefaultCap, newClock(t0).Now)

	r := reserve(t, m, p, "web-1")
	if got := settle(t, m, r, t0, t0); got != 120 {
		t.Fatalf("a 0 s command charged %d s, want 120", got)
	}
	if _, err := m.Settle(context.Background(), r, t0, t0); !errors.Is(err, meter.ErrSettled) {
		t.Fatalf("second settlement: err = %v, want ErrSettled", err)
	}
	if u := usage(t, m, p); u.Used != 120 || u.Reserved != 0 {
		t.Fatalf("usage %+v: want 120 used, nothing reserved", u)
	}
}

// A command whose sandbox never ran is charged nothing, and leaves the
// tail an earlier command paid for where it was.
func TestUnreserveChargesNothing(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	c := newClock(t0)
	m := meter.New(s, meter.DefaultCap, c.Now)
	ctx := context.Background()

	settle(t, m, reserve(t, m, p, "web-1"), t0, t0.Add(sec(10))) // awake until t0+130 s
	c.Set(t0.Add(sec(20)))
	r := reserve(t, m, p, "web-1")
	if err := m.Unreserve(ctx, r); err != nil {
		t.Fatal(err)
	}
	if u := usage(t, m, p); u.Used != 130 || u.Reserved != 0 {
		t.Fatalf("usage %+v: want the first command's 130 s alone, nothing reserved", u)
	}
	if err := m.Unreserve(ctx, r); !errors.Is(err, meter.ErrSettled) {
		t.Fatalf("second Unreserve: %v, want ErrSettled", err)
	}
	if _, err := m.Settle(ctx, r, t0, t0); !errors.Is(err, meter.ErrSettled) {
		t.Fatalf("Settle after Unreserve: %v, want ErrSettled", err)
	}
	// The tail is still the first command's: a command at t0+100 s pays
	// from t0+130 s on.
	c.Set(t0.Add(sec(100)))
	if got := settle(t, m, reserve(t, m, p, "web-1"), t0.Add(sec(100)), t0.Add(sec(110))); got != 100 {
		t.Fatalf("the next command within the tail charged %d s, want 100", got)
	}
}

// The month is the UTC calendar month of the reservation: a command reserved
// late on 31 January (already February on the clock's own zone) that ends in
// February is charged to January.
func TestReservationSettlesIntoItsMonth(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	east := time.FixedZone("UTC+3", 3*3600)
	reservedAt := time.Date(2026, time.January, 31, 23, 59, 0, 0, time.UTC).In(east) // 1 February 02:59 in east
	c := newClock(reservedAt)
	m := meter.New(s, meter.DefaultCap, c.Now)

	r := reserve(t, m, p, "web-1")
	jan := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	if !r.Month.Equal(jan) {
		t.Fatalf("reservation month %v, want %v", r.Month, jan)
	}
	end := reservedAt.Add(sec(90)) // 1 February 00:00:30 UTC
	c.Set(end)
	if got := settle(t, m, r, reservedAt, end); got != 210 {
		t.Fatalf("charged %d s, want 90 + 120", got)
	}
	if u := usage(t, m, p); u.Used != 0 || u.Reserved != 0 || !u.Month.Equal(jan.AddDate(0, 1, 0)) {
		t.Fatalf("February: %+v, want nothing used", u)
	}
	c.Set(reservedAt)
	if u := usage(t, m, p); u.Used != 210 || u.Reserved != 0 || !u.Month.Equal(jan) {
		t.Fatalf("January: %+v, want 210 used", u)
	}
}

// The idle tail belongs to the Sandbox, not to the month: a February command
// inside a tail that began in January pays only what it adds.
func TestTailCrossesTheMonth(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	last := time.Date(2026, time.January, 31, 23, 59, 0, 0, time.UTC)
	c := newClock(last)
	m := meter.New(s, meter.DefaultCap, c.Now)

	settle(t, m, reserve(t, m, p, "web-1"), last, last.Add(sec(10))) // awake until 00:01:10
	next := last.Add(sec(60))
	c.Set(next)
	if got := settle(t, m, reserve(t, m, p, "web-1"), next, next.Add(sec(10))); got != 60 {
		t.Fatalf("charged %d s, want 60 (00:01:10 to 00:02:10)", got)
	}
}

// A project's own cap wins over the default in both directions, and a cap of
// 0 refuses the first command.
func TestProjectCapOverridesTheDefault(t *testing.T) {
	s, ids := newProjects(t, 4)
	lower, higher, off, byDefault := ids[0], ids[1], ids[2], ids[3]
	m := meter.New(s, 2*meter.Chunk, newClock(t0).Now)
	setCap(t, s, lower, meter.Chunk)
	setCap(t, s, higher, 3*meter.Chunk)
	setCap(t, s, off, 0)

	cases := []struct {
		name    string
		project int64
		fits    int
		wantCap int64
	}{
		{"lower", lower, 1, meter.Chunk},
		{"higher", higher, 3, 3 * meter.Chunk},
		{"zero", off, 0, 0},
		{"default", byDefault, 2, 2 * meter.Chunk},
	}
	for _, tc := range cases {
		for i := range tc.fits {
			if _, err := m.Reserve(context.Background(), tc.project, "web-1"); err != nil {
				t.Fatalf("%s: reservation %d: %v", tc.name, i+1, err)
			}
		}
		if _, err := m.Reserve(context.Background(), tc.project, "web-1"); !errors.Is(err, meter.ErrCap) {
			t.Errorf("%s: reservation %d: err = %v, want ErrCap", tc.name, tc.fits+1, err)
		}
		if u := usage(t, m, tc.project); u.Cap != tc.wantCap || u.Reserved != int64(tc.fits)*meter.Chunk {
			t.Errorf("%s: usage %+v, want cap %d", tc.name, u, tc.wantCap)
		}
	}
	if err := s.SetSandboxCap(context.Background(), lower, nil); err != nil {
		t.Fatal(err)
	}
	if u := usage(t, m, lower); u.Cap != 2*meter.Chunk {
		t.Errorf("after clearing the override: cap %d, want the default %d", u.Cap, 2*meter.Chunk)
	}
	neg := int64(-1)
	if err := s.Exec(context.Background(), "UPDATE projects SET sandbox_monthly_seconds = ? WHERE id = ?", neg, lower); !errors.Is(err, models.ErrInvalid) {
		t.Errorf("a negative cap in SQL: err = %v, want the CHECK", err)
	}
}

// A process that died between reserve and settle leaves its reservations
// open; whoever sees it gone settles them, charging each its whole
// reservation less the tail already paid, and leaves those of live
// instances alone: its own, and another instance's on the same database.
func TestSettleAbandoned(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	c := newClock(t0)
	m := meter.New(s, meter.DefaultCap, c.Now)
	ctx := context.Background()
	if _, err := s.StartInstance(ctx, "old", "host-a", "", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartInstance(ctx, "peer", "host-b", "", t0); err != nil {
		t.Fatal(err)
	}
	peers := reserve(t, m, p, "peer") // another live instance's command

	settle(t, m, reserve(t, m, p, "old"), t0, t0.Add(sec(10))) // 130 s, awake until t0+130 s
	c.Set(t0.Add(sec(30)))
	lost := reserve(t, m, p, "old") // the process dies while this command runs
	mine := reserve(t, m, p, "new") // the new process is already at work
	if u := usage(t, m, p); u.Used != 130 || u.Reserved != 3*meter.Chunk {
		t.Fatalf("before: %+v", u)
	}

	c.Set(t0.Add(sec(60)))
	// The new process of host a takes its place: "old" is gone.
	if gone, err := s.StartInstance(ctx, "new", "host-a", "", c.Now()); err != nil || len(gone) != 1 || gone[0] != "old" {
		t.Fatalf("StartInstance = %v, %v; want old gone", gone, err)
	}
	n, err := m.SettleAbandoned(ctx)
	if err != nil || n != 1 {
		t.Fatalf("SettleAbandoned = %d, %v; want 1 settled", n, err)
	}
	if _, err := m.Settle(ctx, peers, t0, t0); err != nil {
		t.Fatalf("the live peer's reservation was taken from it: %v", err)
	}
	// The lost reservation spans t0+30 s to t0+510 s; t0+30 s to t0+130 s
	// was paid by the first command's tail.
	const lostCharge = 480 - 100
	if u := usage(t, m, p); u.Used != 130+lostCharge || u.Reserved != meter.Chunk {
		t.Fatalf("after: %+v, want %d used and only the new process's %d s reserved", u, 130+lostCharge, meter.Chunk)
	}
	if _, err := m.Settle(context.Background(), lost, t0.Add(sec(30)), t0.Add(sec(40))); !errors.Is(err, meter.ErrSettled) {
		t.Fatalf("the dead holder's settlement: err = %v, want ErrSettled", err)
	}
	if n, err := m.SettleAbandoned(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v; want nothing left", n, err)
	}
	// The new process's reservation is intact, and its command, inside the
	// span already charged, adds only what runs past it.
	if got := settle(t, m, mine, t0.Add(sec(500)), t0.Add(sec(500))); got != 110 {
		t.Fatalf("new process's command charged %d s, want 110 (t0+510 s to t0+620 s)", got)
	}
	if u := usage(t, m, p); u.Reserved != 0 {
		t.Fatalf("end: %+v, want nothing reserved", u)
	}
}

// A shell keeps its reservation ahead of its live time chunk by chunk; at the
// cap the renewal is refused and the shell, which must close, is charged no
// more than it held.
func TestRenew(t *testing.T) {
	s, ids := newProjects(t, 1)
	p := ids[0]
	setCap(t, s, p, 2*meter.Chunk)
	c := newClock(t0)
	m := meter.New(s, meter.DefaultCap, c.Now)
	ctx := context.Background()

	sh := reserve(t, m, p, "web-1")
	c.Set(t0.Add(sec(200))) // 200 + 120 + 120 <= 480: nothing to do
	if err := m.Renew(ctx, sh); err != nil || sh.Seconds != meter.Chunk {
		t.Fatalf("early renew: %v, holding %d s", err, sh.Seconds)
	}
	c.Set(t0.Add(sec(300)))
	if err := m.Renew(ctx, sh); err != nil || sh.Seconds != 2*meter.Chunk {
		t.Fatalf("renew: %v, holding %d s, want %d", err, sh.Seconds, 2*meter.Chunk)
	}
	if u := usage(t, m, p); u.Reserved != 2*meter.Chunk {
		t.Fatalf("usage %+v after renew", u)
	}
	c.Set(t0.Add(sec(800)))
	if err := m.Renew(ctx, sh); !errors.Is(err, meter.ErrCap) {
		t.Fatalf("renew at the cap: err = %v, want ErrCap", err)
	}
	if sh.Seconds != 2*meter.Chunk {
		t.Fatalf("a refused renewal changed the holding to %d s", sh.Seconds)
	}
	// Live 0 s to 850 s, plus the tail, is 970 s: more than the 960 s held.
	if got := settle(t, m, sh, t0, t0.Add(sec(850))); got != 2*meter.Chunk {
		t.Fatalf("shell charged %d s, want its holding %d", got, 2*meter.Chunk)
	}
	if u := usage(t, m, p); u.Used != 2*meter.Chunk || u.Reserved != 0 {
		t.Fatalf("usage %+v", u)
	}
	if err := m.Renew(ctx, sh); !errors.Is(err, meter.ErrSettled) {
		t.Fatalf("renew after settling: err = %v, want ErrSettled", err)
	}
}

func TestUsageWarnsFrom80Percent(t *testing.T) {
	for _, tc := range []struct {
		used, cap int64
		want      bool
	}{
		{0, 100, false}, {79, 100, false}, {80, 100, true}, {120, 100, true}, {0, 0, true},
	} {
		if got := (meter.Usage{Used: tc.used, Cap: tc.cap}).Warn(); got != tc.want {
			t.Errorf("%d of %d: Warn = %v, want %v", tc.used, tc.cap, got, tc.want)
		}
	}
}

func TestReserveUnknownProject(t *testing.T) {
	s, _ := newProjects(t, 0)
	m := meter.New(s, meter.DefaultCap, newClock(t0).Now)
	if _, err := m.Reserve(context.Background(), 999, "web-1"); !errors.Is(err, models.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if _, err := m.Usage(context.Background(), 999); !errors.Is(err, models.ErrNotFound) {
		t.Fatalf("usage: err = %v, want ErrNotFound", err)
	}
}
