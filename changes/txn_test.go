package changes

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"atelier/auth"
	"atelier/editsession"
	"atelier/events"
	"atelier/models"
	"atelier/projects"
	"atelier/testrig/stacktest"
	"atelier/testrig/txwatchtest"
	"atelier/testrig/wait"
)

// TestSubmitCallsNoGitInsideATransaction: a submit composes its commit
// (git fast-import under canonical's reservation) before the short
// transaction that locks the session's row, records the Change and begins
// the session's end; so does a script's one-file edit. A submit again
// finds the same Change, and it too calls nothing slow inside a
// transaction. The watch (txwatch) names any git, object store or sandbox
// call made while a transaction of the request is open.
func TestSubmitCallsNoGitInsideATransaction(t *testing.T) {
	ctx := context.Background()
	e := newSubmitEnv(t)
	st, sessions, svc, acc, first := e.st, e.sessions, e.svc, e.acc, e.first
	p, u := acc.Project, acc.User

	watched := func(what string, composes bool, call func(ctx context.Context) error) {
		t.Helper()
		ctx, w := txwatchtest.Attach(ctx)
		if err := call(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if in := w.InTx(); len(in) > 0 {
			t.Errorf("%s called %q inside a transaction", what, in)
		}
		if slices.Contains(w.Seen(), "git fast-import") != composes {
			t.Errorf("%s: composed %v, want %v (%q)", what, !composes, composes, w.Seen())
		}
	}
	watched("a one-file edit", true, func(ctx context.Context) error {
		_, err := svc.EditFile(ctx, acc, "script.txt", []byte("by a script\n"), first, "")
		return err
	})

	sess, _, err := sessions.Open(ctx, acc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sessions.Save(ctx, acc, sess.ID, "src/new.go", []byte("package src\n"), editsession.Precondition{}); err != nil {
		t.Fatal(err)
	}
	var ch *models.Change
	watched("a submit", true, func(ctx context.Context) error {
		var created bool
		ch, created, err = svc.Submit(ctx, acc, sess.ID, "")
		if err == nil && !created {
			t.Error("the first submit found a change")
		}
		return err
	})
	watched("a second submit", false, func(ctx context.Context) error {
		again, created, err := svc.Submit(ctx, acc, sess.ID, "")
		if err == nil && (created || again.ID != ch.ID) {
			t.Errorf("a second submit: change %d, created %v; want %d again", again.ID, created, ch.ID)
		}
		return err
	})
	fork, err := st.Git.OpenBare(projects.WorkspaceForkName(p.ID, u.ID))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "--git-dir", fork.GitDir, "show", ch.CommitSHA+":src/new.go").Output()
	if err != nil || string(out) != "package src\n" {
		t.Fatalf("the change's commit holds %q (%v)", out, err)
	}
	if ch.Message != "Edit src/new.go" || ch.BaseCommit != first {
		t.Fatalf("the change: message %q, base %s; want the default message on %s", ch.Message, ch.BaseCommit, first)
	}
	if cs, err := st.DB.SessionByID(ctx, sess.ID); err != nil || cs.State == models.SessionOpen {
		t.Fatalf("the submitted session is %+v (%v), want it ended", cs, err)
	}
}

// submitEnv is a submit's whole stack: real PostgreSQL, git and object
// store, editsession's Sessions and the Change pipeline, with a Container
// project whose canonical holds its first commit.
type submitEnv struct {
	st       *stacktest.Stack
	sessions *editsession.Sessions
	svc      *Service
	acc      *projects.Access
	first    string
}

func newSubmitEnv(t *testing.T) *submitEnv {
	t.Helper()
	return newSubmitEnvWith(t, editsession.DefaultConfig)
}

// newSubmitEnvWith is newSubmitEnv with sessions bound by cfg and ended
// with cleaners.
func newSubmitEnvWith(t *testing.T, cfg editsession.Config, cleaners ...editsession.Cleaner) *submitEnv {
	t.Helper()
	ctx := context.Background()
	st := stacktest.New(t)
	rec := events.New(st.DB, st.Log, events.Config{})
	t.Cleanup(rec.Close)
	sessions := editsession.New(editsession.Options{DB: st.DB, Git: st.Git, Code: st.Code, Workspace: st.WS, Events: rec,
		Config: cfg, Now: time.Now, Log: st.Log, Cleaners: cleaners})
	svc := New(Options{DB: st.DB, Git: st.Git, Code: st.Code, Workspace: st.WS, Sessions: sessions, Events: rec, Now: time.Now, Log: st.Log})
	u := &models.User{Username: "ann", PasswordHash: "x"}
	if err := st.DB.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	e := &submitEnv{st: st, sessions: sessions, svc: svc}
	e.acc = e.project(t, u, "app")
	e.first = *e.acc.Project.CanonicalCommit
	return e
}

// project makes a Container project of u's whose canonical holds its
// first commit.
func (e *submitEnv) project(t *testing.T, u *models.User, name string) *projects.Access {
	t.Helper()
	ctx := context.Background()
	p := &models.Project{Name: name, WorkspaceDirName: name, WorkspaceMode: models.ModeContainer}
	if err := e.st.DB.CreateProject(ctx, p, u.ID); err != nil {
		t.Fatal(err)
	}
	_, first, err := e.st.Git.CreateCanonical(ctx, projects.CanonicalName(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.DB.SetCanonicalCommit(ctx, p.ID, first); err != nil {
		t.Fatal(err)
	}
	p.CanonicalCommit = &first
	return &projects.Access{Project: p, User: u, Role: auth.RoleOwner}
}

// TestSubmitKeepsASaveMadeWhileItComposes: the edits are read, then
// composed with no lock on the session's row, so the editor may save
// meanwhile. The Change is recorded only if the edits are still those it
// was composed from; else the submit composes them again. A save that
// succeeded is never left out of the Change that ends its session.
func TestSubmitKeepsASaveMadeWhileItComposes(t *testing.T) {
	ctx := context.Background()
	e := newSubmitEnv(t)
	sess, _, err := e.sessions.Open(ctx, e.acc)
	if err != nil {
		t.Fatal(err)
	}
	save := func(path, content string) error {
		_, _, err := e.sessions.Save(ctx, e.acc, sess.ID, path, []byte(content), editsession.Precondition{})
		return err
	}
	if err := save("a.txt", "first\n"); err != nil {
		t.Fatal(err)
	}
	// The person's workspace fork exists (a one-file edit made it), so the
	// submit's only wait on it is the compose, held here until the save.
	if _, err := e.svc.EditFile(ctx, e.acc, "script.txt", []byte("x"), e.first, ""); err != nil {
		t.Fatal(err)
	}
	fork, err := e.st.Git.OpenBare(projects.WorkspaceForkName(e.acc.Project.ID, e.acc.User.ID))
	if err != nil {
		t.Fatal(err)
	}
	release, err := e.st.Git.Lock(ctx, fork.GitDir, true)
	if err != nil {
		t.Fatal(err)
	}
	sctx, w := txwatchtest.Attach(ctx)
	type result struct {
		ch  *models.Change
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, _, err := e.svc.Submit(sctx, e.acc, sess.ID, "")
		done <- result{ch, err}
	}()
	// Canonical's head is read after the edits, just before the compose.
	for deadline := time.Now().Add(time.Minute); !slices.Contains(w.Seen(), "git rev-parse"); {
		if time.Now().After(deadline) {
			t.Fatalf("the submit never read canonical's head: %q", w.Seen())
		}
		time.Sleep(5 * time.Millisecond)
	}
	saveErr := save("b.txt", "saved while composing\n")
	release()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if saveErr != nil {
		t.Fatalf("a save while the submit composed: %v", saveErr)
	}
	if want := []string{"a.txt", "b.txt"}; !slices.Equal(res.ch.Paths, want) {
		t.Fatalf("the change holds %q, want %q: a save that succeeded was left out", res.ch.Paths, want)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("the submit called %q inside a transaction", in)
	}
}

// approved is a one-file Change, approved as an owner approves one.
func (e *submitEnv) approved(t *testing.T, path string) *models.Change {
	t.Helper()
	return e.approvedOn(t, path, e.first)
}

// approvedOn is approved on the base commit base.
func (e *submitEnv) approvedOn(t *testing.T, path, base string) *models.Change {
	t.Helper()
	ctx := context.Background()
	ch, err := e.svc.EditFile(ctx, e.acc, path, []byte("by a script\n"), base, "")
	if err != nil {
		t.Fatal(err)
	}
	wait := models.WaitApproval
	if err := e.st.DB.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{ch.Status}, To: ch.Status, WaitReason: &wait, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ch, err = e.svc.Approve(ctx, e.acc, ch.ID); err != nil {
		t.Fatal(err)
	}
	return ch
}

func (e *submitEnv) main(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", filepath.Join(e.st.Dir, "git", projects.CanonicalName(e.acc.Project.ID)+".git"),
		"rev-parse", "refs/heads/main").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestReleaseMovesCanonicalOutsideTransactions: a release moves
// canonical's branch under canonical's reservation, then records the
// release and canonical's commit in a transaction of SQL alone.
func TestReleaseMovesCanonicalOutsideTransactions(t *testing.T) {
	e := newSubmitEnv(t)
	ch := e.approved(t, "script.txt")
	ctx, w := txwatchtest.Attach(context.Background())
	released, err := e.svc.Release(ctx, e.acc, ch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("the release called %q inside a transaction", in)
	}
	if released.Status != models.ChangeReleased || e.main(t) != ch.CommitSHA {
		t.Fatalf("released %s, canonical at %s; want released at %s", released.Status, e.main(t), ch.CommitSHA)
	}
	if p, err := e.st.DB.ProjectByID(context.Background(), e.acc.Project.ID); err != nil || *p.CanonicalCommit != ch.CommitSHA {
		t.Fatalf("the project records canonical at %v (%v), want %s", p.CanonicalCommit, err, ch.CommitSHA)
	}
}

// TestReleaseNotRecordedMovesCanonicalBack: canonical's branch moves
// before the release is recorded; when it cannot be (here the Change is
// withdrawn in between, by a transaction that holds the project's row
// meanwhile), the branch goes back, and canonical holds no Change that was
// not released.
func TestReleaseNotRecordedMovesCanonicalBack(t *testing.T) {
	e := newSubmitEnv(t)
	ctx := context.Background()
	ch := e.approved(t, "script.txt")
	head := e.main(t)
	locked, moved, withdrawn := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		withdrawn <- e.st.DB.Tx(ctx, func(tx *models.Store) error {
			if _, err := tx.LockProject(ctx, e.acc.Project.ID); err != nil {
				return err
			}
			close(locked)
			<-moved
			return tx.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeWithdrawn, At: time.Now()})
		})
	}()
	<-locked
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Release(ctx, e.acc, ch.ID)
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); e.main(t) != ch.CommitSHA; {
		if time.Now().After(deadline) {
			close(moved)
			t.Fatalf("canonical never moved to the change while the project's row was held: %s", e.main(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(moved)
	if err := <-withdrawn; err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrNotVerified) {
		t.Fatalf("the release of a change withdrawn meanwhile: %v, want ErrNotVerified", err)
	}
	if got := e.main(t); got != head {
		t.Fatalf("canonical at %s after the release failed, want it back at %s", got, head)
	}
}

// localEnv is newSubmitEnv's stack with a Local project instead: a folder
// of the host that is a git repository on branch trunk, admitted as a site
// admin admits one, and a one-file Change on it, approved.
type localEnv struct {
	*submitEnv
	folder string
	start  string // the folder's commit before any release
	ch     *models.Change
}

func newLocalEnv(t *testing.T) *localEnv {
	t.Helper()
	ctx := context.Background()
	e := newSubmitEnv(t)
	folder := filepath.Join(t.TempDir(), "local")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, "README.md"), []byte("# Local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, folder, "init", "-q", "-b", "trunk")
	git(t, folder, "add", ".")
	git(t, folder, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "start")
	admin := &models.User{Username: "root", PasswordHash: "x", IsAdmin: true}
	if err := e.st.DB.CreateUser(ctx, admin); err != nil {
		t.Fatal(err)
	}
	svc := projects.NewService(projects.Options{Store: e.st.DB, Workspace: e.st.WS, Git: e.st.Git, Code: e.st.Code,
		Now: time.Now, Log: e.st.Log})
	p, err := svc.Create(ctx, admin, projects.CreateInput{Name: "local", Mode: models.ModeLocal, Path: folder})
	if err != nil {
		t.Fatal(err)
	}
	e.acc = &projects.Access{Project: p, User: admin, Role: auth.RoleOwner}
	l := &localEnv{submitEnv: e, folder: folder, start: git(t, folder, "rev-parse", "HEAD")}
	l.ch = e.approvedOn(t, "README.md", l.start)
	return l
}

// git runs git in dir and returns its output, trimmed.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %q: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestLocalReleaseMovesTheFolderOutsideTransactions: a Local folder's
// release moves its branch and work tree under the folder's reservation,
// then records the release in a transaction of SQL alone.
func TestLocalReleaseMovesTheFolderOutsideTransactions(t *testing.T) {
	e := newLocalEnv(t)
	ctx, w := txwatchtest.Attach(context.Background())
	released, err := e.svc.Release(ctx, e.acc, e.ch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("the release called %q inside a transaction", in)
	}
	if !slices.Contains(w.Seen(), "git read-tree") {
		t.Fatalf("the release moved no work tree: %q", w.Seen())
	}
	if released.Status != models.ChangeReleased || git(t, e.folder, "rev-parse", "trunk") != e.ch.CommitSHA {
		t.Fatalf("released %s, the folder at %s; want released at %s", released.Status, git(t, e.folder, "rev-parse", "trunk"), e.ch.CommitSHA)
	}
	if b, err := os.ReadFile(filepath.Join(e.folder, "README.md")); err != nil || string(b) != "by a script\n" {
		t.Fatalf("the folder's file: %q (%v)", b, err)
	}
	if st := git(t, e.folder, "status", "--porcelain"); st != "" {
		t.Fatalf("the folder is not clean after the release: %q", st)
	}
}

// TestLocalReleaseNotRecordedMovesTheFolderBack: the folder moves before
// the release is recorded; when it cannot be (the Change is withdrawn in
// between, by a transaction that holds the project's row meanwhile), the
// branch and the work tree go back, and the folder holds no Change that
// was not released.
func TestLocalReleaseNotRecordedMovesTheFolderBack(t *testing.T) {
	e := newLocalEnv(t)
	ctx := context.Background()
	locked, moved, withdrawn := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		withdrawn <- e.st.DB.Tx(ctx, func(tx *models.Store) error {
			if _, err := tx.LockProject(ctx, e.acc.Project.ID); err != nil {
				return err
			}
			close(locked)
			<-moved
			return tx.MoveChange(ctx, e.ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeWithdrawn, At: time.Now()})
		})
	}()
	<-locked
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Release(ctx, e.acc, e.ch.ID)
		done <- err
	}()
	if !wait.Until(wait.Long, func() bool { return git(t, e.folder, "rev-parse", "trunk") == e.ch.CommitSHA }) {
		close(moved)
		t.Fatalf("the folder never moved to the change while the project's row was held: %s", git(t, e.folder, "rev-parse", "trunk"))
	}
	close(moved)
	if err := <-withdrawn; err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrNotVerified) {
		t.Fatalf("the release of a change withdrawn meanwhile: %v, want ErrNotVerified", err)
	}
	if got := git(t, e.folder, "rev-parse", "trunk"); got != e.start {
		t.Fatalf("the folder at %s after the release failed, want it back at %s", got, e.start)
	}
	if b, err := os.ReadFile(filepath.Join(e.folder, "README.md")); err != nil || string(b) != "# Local\n" {
		t.Fatalf("the folder's file after the release failed: %q (%v)", b, err)
	}
	if st := git(t, e.folder, "status", "--porcelain"); st != "" {
		t.Fatalf("the folder is not clean after it moved back: %q", st)
	}
}
