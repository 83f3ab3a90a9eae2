package changes

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"atelier/auth"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a Change pipeline over a real database, git and object store,
// without the sandbox (its changes are approved).
type env struct {
	svc  *Service
	db   *models.Store
	dsn  string // the database's, for what a test reads with SQL
	git  *gitsvc.Service
	acc  *projects.Access
	repo *gitsvc.Repo
	head string
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	ctx := context.Background()
	dsn := dbtest.DSN(tb)
	db, err := models.Open(ctx, dsn, models.DefaultPool)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	log := slog.New(slog.DiscardHandler)
	git, err := gitsvc.New(gitsvc.Config{Root: tb.TempDir(), Timeout: 10 * time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	objects, err := storage.NewLocal(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	code, err := codestore.New(objects, git, db, log, codestore.Options{CachedTrees: 20_000})
	if err != nil {
		tb.Fatal(err)
	}
	u := &models.User{Username: "ann", PasswordHash: "x"}
	if err := db.CreateUser(ctx, u); err != nil {
		tb.Fatal(err)
	}
	p := &models.Project{Name: "bench", WorkspaceDirName: "bench", WorkspaceMode: models.ModeContainer}
	if err := db.CreateProject(ctx, p, u.ID); err != nil {
		tb.Fatal(err)
	}
	repo, first, err := git.CreateCanonical(ctx, projects.CanonicalName(p.ID))
	if err != nil {
		tb.Fatal(err)
	}
	rec := events.New(db, log, events.Config{})
	tb.Cleanup(rec.Close)
	svc := New(Options{DB: db, Git: git, Code: code, Events: rec, Now: time.Now, Log: log})
	return &env{svc: svc, db: db, dsn: dsn, git: git, repo: repo, head: first,
		acc: &projects.Access{Project: p, User: u, Role: auth.RoleOwner}}
}

// fill makes canonical a commit of dirs × subdirs × perDir files and
// publishes it, as an import does.
func (e *env) fill(tb testing.TB, dirs, subdirs, perDir int) {
	tb.Helper()
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter Fixture <fixture@localhost> 1700000000 +0000\ndata 7\nfixture\nfrom %s\ndeleteall\n", e.head)
	for d := 0; d < dirs; d++ {
		for s := 0; s < subdirs; s++ {
			for f := 0; f < perDir; f++ {
				p := fmt.Sprintf("d%03d/s%03d/f%03d.txt", d, s, f)
				fmt.Fprintf(&in, "M 100644 inline %s\ndata %d\ncontent of %s\n\n", p, len(p)+12, p)
			}
		}
	}
	cmd := exec.Command("git", "--git-dir", e.repo.GitDir, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("fast-import: %v\n%s", err, out)
	}
	e.head = e.gitOut(tb, "rev-parse", "main")
	ctx := context.Background()
	if err := e.db.SetCanonicalCommit(ctx, e.acc.Project.ID, e.head); err != nil {
		tb.Fatal(err)
	}
	e.acc.Project.CanonicalCommit = &e.head
	if _, err := e.svc.code.Publish(ctx, e.repo, e.head); err != nil {
		tb.Fatal(err)
	}
}

func (e *env) gitOut(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("git", append([]string{"--git-dir", e.repo.GitDir}, args...)...).Output()
	if err != nil {
		tb.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// edits are n changed files spread over the tree, their content marked by
// round so each round changes them again.
func edits(n, round int) []Edit {
	es := make([]Edit, n)
	for i := range es {
		p := fmt.Sprintf("d%03d/s%03d/f%03d.txt", i%50, 10*(i/50)+i%7, i%20) // all distinct
		es[i] = Edit{Path: p, Content: []byte(fmt.Sprintf("round %d of %s\r\n", round, p))}
	}
	return es
}

// record is recordHumanChange as the Code page's single-file edit runs it.
func (e *env) record(tb testing.TB, base string, es []Edit) *models.Change {
	tb.Helper()
	ch, err := e.compose(base, es)
	if err != nil {
		tb.Fatal(err)
	}
	return ch
}

func (e *env) compose(base string, es []Edit) (*models.Change, error) {
	ch, _, err := e.svc.recordHumanChange(context.Background(), humanChange{project: e.acc.Project, author: e.acc.User,
		base: base, message: "bench",
		edits: func(context.Context) ([]Edit, []models.SessionCommand, *models.Change, error) {
			return es, nil, nil, nil
		},
		record: e.db.CreateChange})
	return ch, err
}

// approve gives the change its evidence, as an owner's approval does.
func (e *env) approve(tb testing.TB, ch *models.Change) {
	tb.Helper()
	wait := models.WaitApproval
	ctx := context.Background()
	if err := e.db.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{ch.Status}, To: ch.Status, WaitReason: &wait, At: time.Now()}); err != nil {
		tb.Fatal(err)
	}
	if _, err := e.svc.Approve(ctx, e.acc, ch.ID); err != nil {
		tb.Fatal(err)
	}
}

// The composed commit is canonical's tree with exactly the edits, each
// byte kept, its base's executable bit kept, and a deletion gone.
func TestRecordHumanChangeComposesExactly(t *testing.T) {
	e := newEnv(t)
	e.fill(t, 2, 2, 3)
	es := append(edits(3, 1), Edit{Path: "new/dir/file.txt", Content: []byte("no newline")}, Edit{Path: "d001/s001/f002.txt", Deleted: true})
	ch := e.record(t, e.head, es)
	if ch.BaseCommit != e.head || ch.Status != models.ChangeComposed || len(ch.Paths) != 5 {
		t.Fatalf("change %+v", ch)
	}
	fork := filepath.Join(filepath.Dir(e.repo.GitDir), workspaceFork(e.acc.Project.ID, e.acc.User.ID)+".git")
	show := func(rev string) (string, error) {
		out, err := exec.Command("git", "--git-dir", fork, "cat-file", "-p", rev).Output()
		return string(out), err
	}
	for _, ed := range es[:4] {
		if got, err := show(ch.CommitSHA + ":" + ed.Path); err != nil || got != string(ed.Content) {
			t.Fatalf("%s: %q %v", ed.Path, got, err)
		}
	}
	if _, err := show(ch.CommitSHA + ":d001/s001/f002.txt"); err == nil {
		t.Fatal("the deleted file is still in the commit")
	}
	if got, _ := show(ch.CommitSHA + ":d000/s001/f001.txt"); got != "content of d000/s001/f001.txt\n" {
		t.Fatalf("an untouched file: %q", got)
	}
	// Edits that leave the repository refused before git sees them.
	for _, bad := range []string{"../x", ".git/config", "a/.git/b", "/etc/passwd"} {
		if _, err := e.compose(e.head, []Edit{{Path: bad, Content: []byte("x")}}); err == nil {
			t.Fatalf("%q was accepted", bad)
		}
	}
}

// One session yields at most one Change, by the database's own index; and
// the trigger refuses a move the pipeline does not have and a verified
// change without evidence, whoever writes the row.
func TestChangeInvariantsInTheDatabase(t *testing.T) {
	e := newEnv(t)
	e.fill(t, 1, 1, 2)
	ctx := context.Background()
	ch := e.record(t, e.head, edits(1, 1))
	for _, stmt := range []string{
		"UPDATE changes SET status = 'released', released_at = now() WHERE id = $1", // composed → released
		"UPDATE changes SET status = 'verified' WHERE id = $1",                      // no evidence
		"UPDATE changes SET status = 'exploded' WHERE id = $1",
		"INSERT INTO changes (project_id, message, base_commit, commit_sha, paths, status) SELECT project_id, 'm', base_commit, commit_sha, paths, 'verified' FROM changes WHERE id = $1",
	} {
		if err := e.db.Exec(ctx, stmt, ch.ID); err == nil {
			t.Errorf("the database took %q", stmt)
		}
	}
	sid := "edit_" + strings.Repeat("a", 32)
	dup := func() error {
		return e.db.Exec(ctx, "INSERT INTO changes (project_id, session_id, message, base_commit, commit_sha, paths) SELECT project_id, $2, 'm', base_commit, commit_sha, paths FROM changes WHERE id = $1", ch.ID, sid)
	}
	if err := dup(); err != nil {
		t.Fatal(err)
	}
	if err := dup(); err == nil || !strings.Contains(err.Error(), "changes_one_per_session") {
		t.Fatalf("a second change of one session: %v", err)
	}
	// The model says the same before PostgreSQL is asked.
	if models.CanMove(models.ChangeComposed, models.ChangeReleased) || models.CanMove(models.ChangeReleased, models.ChangeComposed) {
		t.Fatal("the model allows a move the trigger refuses")
	}
	e.approve(t, ch)
	if got, _ := e.db.ChangeByID(ctx, ch.ID); got.Status != models.ChangeVerified {
		t.Fatalf("approved: %s", got.Status)
	}
}

// A release on 100,000 files (go test -run '^$' -bench . ./changes):
// submit (compose and record) and release (copy, fast-forward, record,
// publish), each beside `git commit` of the same 200 edits in a work tree
// of the same repository, in the same run.
const benchEdits = 200

func benchEnv(b *testing.B) *env {
	e := newEnv(b)
	e.fill(b, 50, 100, 20)
	return e
}

func BenchmarkSubmit200Edits(b *testing.B) {
	e := benchEnv(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		e.record(b, e.head, edits(benchEdits, i))
	}
}

func BenchmarkRelease200Edits(b *testing.B) {
	e := benchEnv(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ch := e.record(b, e.head, edits(benchEdits, i))
		e.approve(b, ch)
		b.StartTimer()
		got, err := e.svc.Release(ctx, e.acc, ch.ID)
		if err != nil || got.Status != models.ChangeReleased {
			b.Fatalf("release: %v", err)
		}
		e.head = got.CommitSHA
	}
}

func BenchmarkGitCommit200Edits(b *testing.B) {
	e := benchEnv(b)
	wt := b.TempDir()
	if out, err := exec.Command("git", "clone", "-q", e.repo.GitDir, wt).CombinedOutput(); err != nil {
		b.Fatalf("clone: %v %s", err, out)
	}
	run := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", wt, "-c", "user.name=b", "-c", "user.email=b@x"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for _, ed := range edits(benchEdits, i) {
			if err := os.WriteFile(filepath.Join(wt, ed.Path), ed.Content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		run("add", "-A")
		run("commit", "-q", "-m", "bench")
	}
}
