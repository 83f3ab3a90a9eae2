package changes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"atelier/editsession"
	"atelier/models"
	"atelier/projects"
	"atelier/testrig/txwatchtest"
)

// racer opens its person's session on another project when a session
// first ends: another tab's opening, at the moment a rebase has begun to
// end the old session.
type racer struct {
	sessions *editsession.Sessions
	acc      *projects.Access
	once     sync.Once
	err      error // the racing opening's
}

func (r *racer) EndSession(ctx context.Context, _ *models.CodeSession) error {
	r.once.Do(func() { _, _, r.err = r.sessions.Open(context.WithoutCancel(ctx), r.acc) })
	return nil
}

// edits returns a session's edits by path.
func (e *submitEnv) edits(t *testing.T, id string) map[string]string {
	t.Helper()
	files, err := e.st.DB.SessionFiles(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Path] = string(f.Content)
	}
	return got
}

// rebaseEnv is a session with three edits, one of them of a path
// canonical changed since (a Change released meanwhile).
func rebaseEnv(t *testing.T, cfg editsession.Config, cleaners ...editsession.Cleaner) (*submitEnv, *editsession.Session) {
	t.Helper()
	ctx := context.Background()
	e := newSubmitEnvWith(t, cfg, cleaners...)
	sess, _, err := e.sessions.Open(ctx, e.acc)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{{"a.txt", "mine a\n"}, {"b.txt", "mine b\n"}, {"src/new.go", "package src\n"}} {
		if _, _, err := e.sessions.Save(ctx, e.acc, sess.ID, f[0], []byte(f[1]), editsession.Precondition{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.Release(ctx, e.acc, e.approved(t, "b.txt").ID); err != nil {
		t.Fatal(err)
	}
	if e.acc.Project, err = e.st.DB.ProjectByID(ctx, e.acc.Project.ID); err != nil {
		t.Fatal(err)
	}
	return e, sess
}

// TestRebaseKeepsTheEditsWhenAnOpeningRaces: a rebase ends the session
// and opens the next on canonical's head with the edits canonical did not
// touch, all in one transaction. Another tab's opening (here on another
// project, where the person's one place would go) that comes once the old
// session's end has begun finds the place taken by the new session, so
// the edits are never left without a session. The git work of a rebase
// runs outside its transactions.
func TestRebaseKeepsTheEditsWhenAnOpeningRaces(t *testing.T) {
	cfg := editsession.DefaultConfig
	cfg.MaxPerUser = 1
	r := &racer{}
	e, sess := rebaseEnv(t, cfg, r)
	r.sessions, r.acc = e.sessions, e.project(t, e.acc.User, "other")

	ctx, w := txwatchtest.Attach(context.Background())
	next, dropped, err := e.svc.Rebase(ctx, e.acc, sess.ID)
	if err != nil {
		t.Fatalf("the rebase: %v (the racing opening: %v)", err, r.err)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("the rebase called %q inside a transaction", in)
	}
	if !hasGit(w.Seen()) {
		t.Errorf("the rebase ran no git: %q", w.Seen())
	}
	if !errors.Is(r.err, editsession.ErrTooManySessions) {
		t.Fatalf("the racing opening: %v, want ErrTooManySessions: the new session holds the person's place", r.err)
	}
	if !slices.Equal(dropped, []string{"b.txt"}) || next.BaseCommit != *e.acc.Project.CanonicalCommit {
		t.Fatalf("rebased onto %s leaving %q; want onto %s leaving b.txt", next.BaseCommit, dropped, *e.acc.Project.CanonicalCommit)
	}
	if got := e.edits(t, next.ID); len(got) != 2 || got["a.txt"] != "mine a\n" || got["src/new.go"] != "package src\n" {
		t.Fatalf("the new session holds %q, want a.txt and src/new.go as saved", got)
	}
	if old, err := e.st.DB.SessionByID(context.Background(), sess.ID); err != nil || old.State != models.SessionClosed {
		t.Fatalf("the old session is %+v (%v), want it closed", old, err)
	}
}

func hasGit(calls []string) bool {
	for _, c := range calls {
		if strings.HasPrefix(c, "git ") {
			return true
		}
	}
	return false
}

// TestRebaseRefusedLosesNothing: when the new session may not open (here
// every session's disk would not fit the total while the old one's is
// still there), the rebase is refused with the opening's fault, and the
// old session is open with every edit, and no fork is left of the new.
func TestRebaseRefusedLosesNothing(t *testing.T) {
	cfg := editsession.DefaultConfig
	cfg.DiskBytes, cfg.DiskTotal = 1<<30, 1<<30
	e, sess := rebaseEnv(t, cfg)
	before := e.edits(t, sess.ID)
	forks, err := e.st.Git.Names("edit-")
	if err != nil {
		t.Fatal(err)
	}

	if _, _, err := e.svc.Rebase(context.Background(), e.acc, sess.ID); !errors.Is(err, editsession.ErrDiskFull) {
		t.Fatalf("a rebase past the disks' total: %v, want ErrDiskFull", err)
	}
	if cs, err := e.st.DB.SessionByID(context.Background(), sess.ID); err != nil || cs.State != models.SessionOpen {
		t.Fatalf("the session is %+v (%v), want it open still", cs, err)
	}
	if got := e.edits(t, sess.ID); len(got) != 3 || !maps.Equal(got, before) {
		t.Fatalf("the session holds %q after a refused rebase, want %q", got, before)
	}
	if cs, err := e.st.DB.OpenSessionOf(context.Background(), e.acc.Project.ID, e.acc.User.ID); err != nil || cs.ID != sess.ID {
		t.Fatalf("the person's open session is %+v (%v), want %s", cs, err, sess.ID)
	}
	if after, err := e.st.Git.Names("edit-"); err != nil || !slices.Equal(after, forks) {
		t.Fatalf("forks %q after a refused rebase (%v), want %q", after, err, forks)
	}
}
