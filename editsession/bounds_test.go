package editsession

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/auth"
	"atelier/events"
	"atelier/fault"
	"atelier/models"
	"atelier/projects"
	"atelier/testrig/stacktest"
)

// boundsFixture is Sessions with a Config of the test's over a fresh
// stack, and people with projects to open sessions on.
type boundsFixture struct {
	t        *testing.T
	ctx      context.Context
	st       *stacktest.Stack
	sessions *Sessions
}

func newBoundsFixture(t *testing.T, cfg Config) *boundsFixture {
	t.Helper()
	st := stacktest.New(t)
	rec := events.New(st.DB, st.Log, events.Config{})
	t.Cleanup(rec.Close)
	return &boundsFixture{t: t, ctx: context.Background(), st: st, sessions: New(Options{DB: st.DB, Git: st.Git, Code: st.Code,
		Workspace: st.WS, Events: rec, Config: cfg, Now: time.Now, Log: st.Log})}
}

func (b *boundsFixture) person(name string) *models.User {
	b.t.Helper()
	u := &models.User{Username: name, PasswordHash: "unused"}
	if err := b.st.DB.CreateUser(b.ctx, u); err != nil {
		b.t.Fatal(err)
	}
	return u
}

// project makes a Container project of owner with a canonical commit, and
// returns the owner's access to it.
func (b *boundsFixture) project(owner *models.User, name string) *projects.Access {
	b.t.Helper()
	p := &models.Project{Name: name, WorkspaceDirName: name, WorkspaceMode: models.ModeContainer}
	if err := b.st.DB.CreateProject(b.ctx, p, owner.ID); err != nil {
		b.t.Fatal(err)
	}
	_, first, err := b.st.Git.CreateCanonical(b.ctx, projects.CanonicalName(p.ID))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := b.st.DB.Exec(b.ctx, "UPDATE projects SET canonical_commit = ? WHERE id = ?", first, p.ID); err != nil {
		b.t.Fatal(err)
	}
	if p, err = b.st.DB.ProjectByID(b.ctx, p.ID); err != nil {
		b.t.Fatal(err)
	}
	return &projects.Access{Project: p, User: owner, Role: auth.RoleOwner}
}

// openAtOnce opens a session on each of accs at the same moment and
// returns what each got.
func (b *boundsFixture) openAtOnce(accs []*projects.Access) ([]*Session, []error) {
	sessions, errs := make([]*Session, len(accs)), make([]error, len(accs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, acc := range accs {
		wg.Go(func() {
			<-start
			sessions[i], _, errs[i] = b.sessions.Open(b.ctx, acc)
		})
	}
	close(start)
	wg.Wait()
	return sessions, errs
}

func (b *boundsFixture) openOf(u *models.User) int {
	b.t.Helper()
	n, err := b.st.DB.SessionCountsLocked(b.ctx, u.ID, 0, false)
	if err != nil {
		b.t.Fatal(err)
	}
	return n.Mine
}

// A person holds at most MaxPerUser open sessions across projects, even
// when they open many at once: past it the opening is refused with
// too_many_sessions and the sessions already open stay; another person is
// not bound by it; and openings at once of the one project they may still
// open all get the same session, none refused.
func TestSessionsPerPersonAreBounded(t *testing.T) {
	b := newBoundsFixture(t, DefaultConfig)
	ann := b.person("ann")
	var accs []*projects.Access
	for i := range 8 {
		accs = append(accs, b.project(ann, fmt.Sprintf("p%d", i)))
	}
	first, _, err := b.sessions.Open(b.ctx, accs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.sessions.Open(b.ctx, accs[1]); err != nil {
		t.Fatal(err)
	}
	opened, errs := b.openAtOnce(accs[2:])
	var made int
	for i, err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, ErrTooManySessions):
			var fe fault.Error
			if !errors.As(err, &fe) || fe.Fault().Kind != fault.Limit || !strings.Contains(fe.Fault().Message, "(4, in other projects)") {
				t.Errorf("the refusal does not say the bound: %v", err)
			}
		default:
			t.Errorf("opening %d: %v", i, err)
		}
	}
	if made != 2 || b.openOf(ann) != 4 {
		t.Fatalf("six openings at once with two of four places left: %d made, %d open", made, b.openOf(ann))
	}
	if _, err := b.sessions.Get(b.ctx, accs[0], first.ID, false); err != nil {
		t.Errorf("a session open before the refusals: %v", err)
	}
	bob := b.person("bob")
	if _, _, err := b.sessions.Open(b.ctx, b.project(bob, "theirs")); err != nil {
		t.Errorf("another person was refused: %v", err)
	}

	// Three open, and six openings of one more project at once: one
	// session, which all six get.
	for i, s := range opened {
		if s != nil {
			if err := b.sessions.Discard(b.ctx, s); err != nil {
				t.Fatal(err)
			}
			opened[i] = nil
			break
		}
	}
	var free *projects.Access
	for i, s := range opened {
		if s == nil && free == nil && errs[i] != nil {
			free = accs[2+i]
		}
	}
	same := []*projects.Access{free, free, free, free, free, free}
	got, errs := b.openAtOnce(same)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("opening %d of one project at once: %v", i, err)
		}
		if got[i].ID != got[0].ID {
			t.Fatalf("openings of one project at once got %s and %s", got[0].ID, got[i].ID)
		}
	}
	if b.openOf(ann) != 4 {
		t.Errorf("%d sessions open, want 4", b.openOf(ann))
	}
}

// All sessions' disks together stay within DiskTotal, each counted whole:
// with room for two, six people opening at once get two sessions, and the
// others sandbox_disk_full (507) saying why; once one ends, one more fits.
func TestSessionsDiskTotalIsBounded(t *testing.T) {
	cfg := DefaultConfig
	cfg.DiskBytes, cfg.DiskTotal = 64<<20, 2*64<<20+32<<20
	b := newBoundsFixture(t, cfg)
	var accs []*projects.Access
	for i := range 6 {
		accs = append(accs, b.project(b.person(fmt.Sprintf("u%d", i)), fmt.Sprintf("p%d", i)))
	}
	opened, errs := b.openAtOnce(accs)
	var made []*Session
	var refused []*projects.Access
	for i, err := range errs {
		switch {
		case err == nil:
			made = append(made, opened[i])
		case errors.Is(err, ErrDiskFull):
			refused = append(refused, accs[i])
			var fe fault.Error
			if !errors.As(err, &fe) || fe.Fault().Kind != fault.Full || fe.Fault().Reason != "sandbox_disk_full" ||
				!strings.Contains(fe.Fault().Message, "the 2 sessions on it hold 128 MiB of the 160 MiB") {
				t.Errorf("the refusal does not say why: %v", err)
			}
		default:
			t.Errorf("opening %d: %v", i, err)
		}
	}
	if len(made) != 2 {
		t.Fatalf("%d of six openings at once made it with room for two", len(made))
	}
	if _, _, err := b.sessions.Open(b.ctx, refused[0]); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("a third opening after the rush: %v", err)
	}
	if err := b.sessions.Discard(b.ctx, made[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.sessions.Open(b.ctx, refused[0]); err != nil {
		t.Errorf("an opening once a session ended: %v", err)
	}
}

// An account disabled while a request of its person was already past its
// sign-in opens no session: the opening reads the account under the lock
// disabling takes, and nothing of it is left.
func TestDisabledPersonOpensNoSession(t *testing.T) {
	b := newBoundsFixture(t, DefaultConfig)
	ann := b.person("ann")
	acc := b.project(ann, "p")
	if err := b.st.DB.SetUserDisabled(b.ctx, ann.ID, new(time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.sessions.Open(b.ctx, acc); !errors.Is(err, auth.ErrDisabled) {
		t.Fatalf("an opening for a disabled account: %v", err)
	}
	if n := b.openOf(ann); n != 0 {
		t.Fatalf("%d sessions were opened", n)
	}
	forks, err := b.st.Git.Names("edit-")
	if err != nil || len(forks) != 0 {
		t.Errorf("forks left: %v %v", forks, err)
	}
}
