package changes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"atelier/events"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/testrig/wait"
	"atelier/workbench"
)

// These tests run several verifiers ("instances") on one database, as
// several servers on one PostgreSQL do. The sandbox's own check is tested
// with the server (TestCheckDecidesRelease, TestVerificationSurvivesRestart);
// here each instance's Checker says which instance ran which Change's
// check, and holds it as long as the test needs.

// clock is a time the test moves; every instance of a test reads it, as
// servers read one wall clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ran is one run of a check: the instance and the Change.
type ran struct {
	instance string
	change   int64
}

// runs notes every check any instance runs.
type runs struct {
	mu   sync.Mutex
	list []ran
}

func (r *runs) all() []ran {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

func (r *runs) of(change int64) []string {
	var who []string
	for _, x := range r.all() {
		if x.change == change {
			who = append(who, x.instance)
		}
	}
	return who
}

// checker is one instance's Checker: it notes the run, waits for gate
// (when set) and answers with exit (or err).
type checker struct {
	name string
	runs *runs
	gate chan struct{}
	exit int
	err  error
}

func (c *checker) RunCheck(ctx context.Context, _ *models.Project, _ *gitsvc.Repo, _, _ string, key int64) (*workbench.CheckResult, error) {
	c.runs.mu.Lock()
	c.runs.list = append(c.runs.list, ran{c.name, key})
	c.runs.mu.Unlock()
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return &workbench.CheckResult{ExitCode: c.exit, DurationMS: 1, Output: []byte(c.name + " checked\n")}, nil
}

// notes keeps what an instance logs, so a test sees a step it cannot see
// in the database (a run that recorded nothing).
type notes struct {
	mu   sync.Mutex
	msgs []string
}

func (n *notes) Enabled(context.Context, slog.Level) bool { return true }
func (n *notes) Handle(_ context.Context, r slog.Record) error {
	n.mu.Lock()
	n.msgs = append(n.msgs, r.Message)
	n.mu.Unlock()
	return nil
}
func (n *notes) WithAttrs([]slog.Attr) slog.Handler { return n }
func (n *notes) WithGroup(string) slog.Handler      { return n }

func (n *notes) saw(part string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.msgs, func(m string) bool { return strings.Contains(m, part) })
}

// testPoll is how often the tests' instances poll: often, so that two
// polling instances really meet.
const testPoll = 2 * time.Millisecond

// instance is another verifier on the env's database, git and event log.
func (e *env) instance(name string, now func() time.Time, c *checker, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return New(Options{DB: e.db, Git: e.git, Code: e.svc.code, Workspace: e.svc.ws, Events: e.svc.events,
		Checks: c, Now: now, Log: log, Instance: name, PollEvery: testPoll})
}

// start runs s's verifier until the returned stop (or the test's end).
func start(t *testing.T, s *Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// checked is a project with a check command and n Changes to verify.
func (e *env) checked(t *testing.T, n int) []int64 {
	t.Helper()
	e.fill(t, 1, 1, 2)
	command := "make check"
	if err := e.db.SetCheckCommand(context.Background(), e.acc.Project.ID, &command); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = e.record(t, e.head, edits(1, i)).ID
	}
	return ids
}

func (e *env) status(t *testing.T, id int64) (string, []models.Evidence) {
	t.Helper()
	ch, err := e.db.ChangeByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := e.db.EvidenceOf(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Status, ev
}

// queueRow is the change's place in the verifiers' queue.
type queueRow struct {
	due      *time.Time
	attempts int
	by       *string
	until    *time.Time
}

func (e *env) queueRow(t *testing.T, id int64) queueRow {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var q queueRow
	err = conn.QueryRow(ctx, `SELECT check_due, check_attempts, claimed_by, claimed_until FROM changes WHERE id = $1`, id).
		Scan(&q.due, &q.attempts, &q.by, &q.until)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func (e *env) eventCount(t *testing.T, typ string) int {
	t.Helper()
	evs, err := e.db.EventsOf(context.Background(), e.acc.Project.ID, typ)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// idle lets the polling instances poll many times over; a check they
// should not run would have started meanwhile.
func idle() { time.Sleep(100 * testPoll) }

// Two instances poll one database for the same Changes at once: each
// Change's check runs once, by one of them, and is recorded once.
func TestCheckRunsOnceWhileTwoInstancesPoll(t *testing.T) {
	e := newEnv(t)
	ids := e.checked(t, 12)
	var r runs
	gate := make(chan struct{}) // both hold their first check, so both poll while the other runs
	a := e.instance("a", time.Now, &checker{name: "a", runs: &r, gate: gate}, nil)
	b := e.instance("b", time.Now, &checker{name: "b", runs: &r, gate: gate}, nil)
	start(t, a)
	start(t, b)
	wait.For(t, wait.Short, "both instances to run a check", func() bool {
		who := map[string]bool{}
		for _, x := range r.all() {
			who[x.instance] = true
		}
		return who["a"] && who["b"]
	})
	close(gate)
	for _, id := range ids {
		wait.For(t, wait.Short, fmt.Sprintf("change %d verified", id), func() bool {
			st, _ := e.status(t, id)
			return st == models.ChangeVerified
		})
	}
	idle()
	for _, id := range ids {
		if who := r.of(id); len(who) != 1 {
			t.Errorf("change %d was checked by %q, want one run", id, who)
		}
		if _, ev := e.status(t, id); len(ev) != 1 || !ev[0].Passed {
			t.Errorf("change %d has evidence %+v, want one passing", id, ev)
		}
		if q := e.queueRow(t, id); q.due != nil || q.by != nil || q.attempts != 1 {
			t.Errorf("change %d left in the queue: %+v", id, q)
		}
	}
	if n := e.eventCount(t, events.ChangeVerified); n != len(ids) {
		t.Errorf("%d change.verified events for %d changes", n, len(ids))
	}
}

// A new instance (a server started while another runs a check) finds the
// Change verifying and claimed, and leaves it alone: the check runs once.
func TestNewInstanceLeavesARunningCheckAlone(t *testing.T) {
	e := newEnv(t)
	id := e.checked(t, 1)[0]
	var r runs
	gate := make(chan struct{})
	start(t, e.instance("a", time.Now, &checker{name: "a", runs: &r, gate: gate}, nil))
	wait.For(t, wait.Short, "a to run the check", func() bool { return len(r.all()) == 1 })
	if st, _ := e.status(t, id); st != models.ChangeVerifying {
		t.Fatalf("the change is %s while its check runs", st)
	}
	start(t, e.instance("b", time.Now, &checker{name: "b", runs: &r}, nil))
	idle()
	if who := r.of(id); !slices.Equal(who, []string{"a"}) {
		t.Fatalf("checks run by %q while a's runs, want only a's", who)
	}
	if q := e.queueRow(t, id); q.by == nil || *q.by != "a" || q.until == nil {
		t.Fatalf("the claim while a's check runs: %+v", q)
	}
	close(gate)
	wait.For(t, wait.Short, "the change verified", func() bool {
		st, _ := e.status(t, id)
		return st == models.ChangeVerified
	})
	idle()
	if who := r.of(id); !slices.Equal(who, []string{"a"}) {
		t.Fatalf("checks run by %q, want a's alone", who)
	}
}

// An instance stalls mid-check (it stops renewing its claim, as one that
// died does): once the claim expired, one of the two other instances
// takes the check, once. When the stalled one wakes and its check ends
// first, with another exit, it records nothing: the Change has the
// evidence of the instance that holds the claim.
func TestStalledInstanceCheckIsTakenOverOnce(t *testing.T) {
	e := newEnv(t)
	clk := newClock()
	e.svc.now = clk.Now
	id := e.checked(t, 1)[0]
	var r runs
	gateA, gateBC := make(chan struct{}), make(chan struct{})
	var logA notes
	a := e.instance("a", clk.Now, &checker{name: "a", runs: &r, gate: gateA, exit: 1}, slog.New(&logA))
	a.renewEvery = time.Hour // it stalls: no renewal comes
	start(t, a)
	wait.For(t, wait.Short, "a to run the check", func() bool { return len(r.all()) == 1 })

	start(t, e.instance("b", clk.Now, &checker{name: "b", runs: &r, gate: gateBC}, nil))
	start(t, e.instance("c", clk.Now, &checker{name: "c", runs: &r, gate: gateBC}, nil))
	idle()
	if who := r.of(id); len(who) != 1 {
		t.Fatalf("checks run by %q before a's claim expired, want a's alone", who)
	}

	clk.Add(defaultClaimFor + time.Second)
	wait.For(t, wait.Short, "another instance to take the check", func() bool { return len(r.of(id)) == 2 })
	idle()
	who := r.of(id)
	if len(who) != 2 || who[0] != "a" || (who[1] != "b" && who[1] != "c") {
		t.Fatalf("checks run by %q, want a's and then one of b's or c's", who)
	}
	if q := e.queueRow(t, id); q.by == nil || *q.by != who[1] || q.attempts != 2 {
		t.Fatalf("the claim after the take-over: %+v, want %s's second attempt", q, who[1])
	}

	// a's check ends, failing, while the new holder's still runs.
	close(gateA)
	wait.For(t, wait.Short, "a to find its claim lost", func() bool { return logA.saw("claim on a check was lost") })
	if st, ev := e.status(t, id); st != models.ChangeVerifying || len(ev) != 0 {
		t.Fatalf("after a's stale check: %s with %d evidence, want verifying with none", st, len(ev))
	}
	close(gateBC)
	wait.For(t, wait.Short, "the change verified", func() bool {
		st, _ := e.status(t, id)
		return st == models.ChangeVerified
	})
	idle()
	if _, ev := e.status(t, id); len(ev) != 1 || !ev[0].Passed || !strings.Contains(*ev[0].OutputTail, who[1]+" checked") {
		t.Fatalf("evidence %+v, want %s's passing check alone", ev, who[1])
	}
	if n := len(r.of(id)); n != 2 {
		t.Fatalf("%d runs of the check, want 2", n)
	}
	if n := e.eventCount(t, events.ChangeFailed); n != 0 {
		t.Fatalf("%d change.failed events from the stale check", n)
	}
}

// A check that could not run is tried again at its time, which the
// database keeps: the instance that failed to run it stops, and a new one
// runs it when (and not before) the retry is due: a minute later for a
// sandbox that failed, 5 s for a full instance.
func TestRetriesSurviveARestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		wait time.Duration
	}{
		{"failed", errors.New("the sandbox is away"), retryLater},
		{"busy", workbench.ErrSandboxBusy, retryBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			clk := newClock()
			e.svc.now = clk.Now
			id := e.checked(t, 1)[0]
			var r runs
			stopA := start(t, e.instance("a", clk.Now, &checker{name: "a", runs: &r, err: tc.err}, nil))
			var q queueRow
			wait.For(t, wait.Short, "a to let go of the check", func() bool {
				q = e.queueRow(t, id)
				return len(r.all()) == 1 && q.by == nil
			})
			stopA()
			if want := clk.Now().Add(tc.wait); q.due == nil || q.due.Sub(want).Abs() > time.Millisecond || q.attempts != 1 {
				t.Fatalf("after a's attempt: %+v, want due at %s after 1 attempt", q, want)
			}

			start(t, e.instance("b", clk.Now, &checker{name: "b", runs: &r}, nil))
			idle()
			clk.Add(tc.wait - time.Second)
			idle()
			if who := r.of(id); !slices.Equal(who, []string{"a"}) {
				t.Fatalf("checks run by %q before the retry's time, want a's alone", who)
			}
			clk.Add(2 * time.Second)
			wait.For(t, wait.Short, "the change verified", func() bool {
				st, _ := e.status(t, id)
				return st == models.ChangeVerified
			})
			idle()
			if who := r.of(id); !slices.Equal(who, []string{"a", "b"}) {
				t.Fatalf("checks run by %q, want a's and then b's", who)
			}
		})
	}
}

// A Change queued on this instance wakes its verifier at once, and the
// Queued hook lets another instance's Wakeups do the same there, with
// polls an hour apart.
func TestQueuedChangeWakesTheVerifiers(t *testing.T) {
	e := newEnv(t)
	e.checked(t, 0)
	var r runs
	wakeB := make(chan struct{}, 1)
	tell := func() {
		select {
		case wakeB <- struct{}{}:
		default:
		}
	}
	a := New(Options{DB: e.db, Git: e.git, Code: e.svc.code, Workspace: e.svc.ws, Events: e.svc.events, Now: time.Now,
		Log: slog.New(slog.DiscardHandler), Checks: &checker{name: "a", runs: &r}, Instance: "a", PollEvery: time.Hour, Queued: tell})
	b := New(Options{DB: e.db, Git: e.git, Code: e.svc.code, Workspace: e.svc.ws, Events: e.svc.events, Now: time.Now,
		Log: slog.New(slog.DiscardHandler), Checks: &checker{name: "b", runs: &r}, Instance: "b", PollEvery: time.Hour, Wakeups: wakeB})
	// Each Run polls once as it begins; a Change queued after that is
	// found only by a wake-up.
	stopA := start(t, a)
	ctx := context.Background()
	first, err := a.EditFile(ctx, e.acc, "one.txt", []byte("one\n"), e.head, "")
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, wait.Short, "a to verify the change queued on it", func() bool {
		st, _ := e.status(t, first.ID)
		return st == models.ChangeVerified
	})
	stopA()
	start(t, b)
	idle() // b's first poll is over
	second, err := a.EditFile(ctx, e.acc, "two.txt", []byte("two\n"), e.head, "")
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, wait.Short, "b to verify the change queued on a", func() bool {
		st, _ := e.status(t, second.ID)
		return st == models.ChangeVerified
	})
	if got := r.all(); !slices.Equal(got, []ran{{"a", first.ID}, {"b", second.ID}}) {
		t.Fatalf("runs %v", got)
	}
}

// The queue's rules hold in the database, whoever writes the row: a claim
// has its holder and its expiry, only a queued Change is claimed, and a
// Change that left the way to verified is not queued.
func TestQueueInvariantsInTheDatabase(t *testing.T) {
	e := newEnv(t)
	id := e.checked(t, 1)[0]
	ctx := context.Background()
	for stmt, constraint := range map[string]string{
		"UPDATE changes SET claimed_by = 'a' WHERE id = $1":                                          "changes_claim_complete",
		"UPDATE changes SET claimed_until = now() WHERE id = $1":                                     "changes_claim_complete",
		"UPDATE changes SET claimed_by = '', claimed_until = now() WHERE id = $1":                    "changes_claimed_by_length",
		"UPDATE changes SET check_due = NULL, claimed_by = 'a', claimed_until = now() WHERE id = $1": "changes_claim_queued",
		"UPDATE changes SET check_attempts = -1 WHERE id = $1":                                       "changes_check_attempts_counted",
		"UPDATE changes SET status = 'withdrawn' WHERE id = $1":                                      "changes_queued_unfinished",
	} {
		var ce *models.ConstraintError
		if err := e.db.Exec(ctx, stmt, id); !errors.As(err, &ce) || ce.Constraint != constraint {
			t.Errorf("%s: %v, want %s", stmt, err, constraint)
		}
	}
	// A Change inserted by hand is due at once.
	if err := e.db.Exec(ctx, "INSERT INTO changes (project_id, message, base_commit, commit_sha, paths) SELECT project_id, 'm', base_commit, commit_sha, paths FROM changes WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	if q := e.queueRow(t, id+1); q.due == nil || q.by != nil {
		t.Fatalf("a change inserted by SQL: %+v, want due", q)
	}
}

// A Change withdrawn while its check runs leaves the queue with its claim;
// the instance running the check finds the claim gone at its next renewal
// and stops the check, which records nothing.
func TestWithdrawnChangeStopsItsCheck(t *testing.T) {
	e := newEnv(t)
	id := e.checked(t, 1)[0]
	var r runs
	var logA notes
	a := e.instance("a", time.Now, &checker{name: "a", runs: &r, gate: make(chan struct{})}, slog.New(&logA))
	a.renewEvery = 10 * time.Millisecond
	start(t, a)
	wait.For(t, wait.Short, "a to run the check", func() bool { return len(r.all()) == 1 })
	if _, err := e.svc.Withdraw(context.Background(), e.acc, id); err != nil {
		t.Fatal(err)
	}
	wait.For(t, wait.Short, "a to stop the check", func() bool { return logA.saw("claim on a check was lost") })
	if st, ev := e.status(t, id); st != models.ChangeWithdrawn || len(ev) != 0 {
		t.Fatalf("%s with %d evidence, want withdrawn with none", st, len(ev))
	}
	if q := e.queueRow(t, id); q.due != nil || q.by != nil || q.until != nil {
		t.Fatalf("the withdrawn change is still queued: %+v", q)
	}
}
