package editsession

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/auth"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/testrig/pgtest"
	"atelier/testrig/stacktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is Sessions over a fresh database, a real git service and an
// object store in a folder, with one Container project whose canonical
// commit holds base.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	store    *models.Store
	git      *gitsvc.Service
	sessions *Sessions
	owner    *projects.Access
	mu       sync.Mutex
	now      time.Time
}

// base is the project's code: a CRLF file without a final newline, an
// executable-free tree two levels deep, and a file over the edit limit.
var base = map[string]string{
	"crlf.txt":    "one\r\ntwo",
	"src/main.go": "package main\n",
	"big.txt":     strings.Repeat("x", MaxFileBytes+1),
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st := stacktest.New(t)
	store, git, code, ws, log := st.DB, st.Git, st.Code, st.WS, st.Log
	rec := events.New(store, log, events.Config{})
	t.Cleanup(rec.Close)
	f := &fixture{t: t, ctx: ctx, store: store, git: git, now: time.Now()}
	f.sessions = New(Options{DB: store, Git: git, Code: code, Workspace: ws, Events: rec, Config: DefaultConfig, Now: f.clock, Log: log})

	user := &models.User{Username: "ann", PasswordHash: "unused"}
	if err := store.CreateUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	p := &models.Project{Name: "app", WorkspaceDirName: "app", WorkspaceMode: models.ModeContainer}
	if err := store.CreateProject(ctx, p, user.ID); err != nil {
		t.Fatal(err)
	}
	repo, first, err := git.CreateCanonical(ctx, projects.CanonicalName(p.ID))
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(st.Dir, "tree")
	for path, content := range base {
		full := filepath.Join(tree, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit, err := git.CommitTree(ctx, repo, tree, []string{first}, "base")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Exec(ctx, "UPDATE projects SET canonical_commit = ? WHERE id = ?", commit, p.ID); err != nil {
		t.Fatal(err)
	}
	if p, err = store.ProjectByID(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	f.owner = &projects.Access{Project: p, User: user, Role: auth.RoleOwner}
	return f
}

func (f *fixture) open() *Session {
	f.t.Helper()
	sess, created, err := f.sessions.Open(f.ctx, f.owner)
	if err != nil || !created {
		f.t.Fatalf("Open = created %v, %v", created, err)
	}
	return sess
}

func (f *fixture) save(sess *Session, path, content string, cond Precondition) (string, error) {
	_, etag, err := f.sessions.Save(f.ctx, f.owner, sess.ID, path, []byte(content), cond)
	return etag, err
}

// TestExactBytes: a file comes back byte for byte as saved (CRLF, no final
// newline, empty), with the ETag of those bytes, and the diff shows the
// missing newline.
func TestExactBytes(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	got, err := f.sessions.Read(f.ctx, sess, "crlf.txt")
	if err != nil || string(got.Content) != base["crlf.txt"] || got.ETag != ETag([]byte(base["crlf.txt"])) {
		t.Fatalf("base file = %+v, %v", got, err)
	}
	for _, content := range []string{"one\r\ntwo\r\nthree", "no newline", "", "trailing\n\n"} {
		etag, err := f.save(sess, "crlf.txt", content, Precondition{})
		if err != nil {
			t.Fatalf("save %q: %v", content, err)
		}
		got, err := f.sessions.Read(f.ctx, sess, "crlf.txt")
		if err != nil || !bytes.Equal(got.Content, []byte(content)) || got.ETag != etag || etag != ETag([]byte(content)) {
			t.Fatalf("after saving %q: %+v, %v (etag %s)", content, got, err, etag)
		}
	}
	if _, err := f.save(sess, "crlf.txt", "one\r\ntwo\r\nthree", Precondition{}); err != nil {
		t.Fatal(err)
	}
	d, err := f.sessions.Diff(f.ctx, sess, "crlf.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d, "-two\n\\ No newline at end of file\n") || !strings.Contains(d, "+two\r\n") {
		t.Errorf("diff does not show the line endings as they are:\n%q", d)
	}
	// Saving the base's own bytes forgets the edit.
	if _, err := f.save(sess, "crlf.txt", base["crlf.txt"], Precondition{}); err != nil {
		t.Fatal(err)
	}
	if changes, err := f.sessions.Changes(f.ctx, sess); err != nil || len(changes) != 0 {
		t.Errorf("changes after restoring the base: %v, %v", changes, err)
	}
}

// TestFileLimits: 256 KiB is the most a file holds, on save and on read,
// and a file with a NUL byte is not text.
func TestFileLimits(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	if _, err := f.save(sess, "max.txt", strings.Repeat("a", MaxFileBytes), Precondition{}); err != nil {
		t.Fatalf("a file of exactly %d bytes: %v", MaxFileBytes, err)
	}
	if _, err := f.save(sess, "over.txt", strings.Repeat("a", MaxFileBytes+1), Precondition{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte over: %v, want ErrTooLarge", err)
	}
	if _, err := f.sessions.Read(f.ctx, sess, "big.txt"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("reading a base file over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := f.save(sess, "bin.dat", "a\x00b", Precondition{}); !errors.Is(err, ErrBinary) {
		t.Errorf("a NUL byte: %v, want ErrBinary", err)
	}
	for _, bad := range []string{"../escape", "/abs", "a/../../b", ""} {
		if _, err := f.save(sess, bad, "x", Precondition{}); err == nil {
			t.Errorf("path %q was saved", bad)
		}
	}
	if changes, _ := f.sessions.Changes(f.ctx, sess); len(changes) != 1 || changes[0] != (Change{Path: "max.txt", Status: Added}) {
		t.Errorf("changes = %v, want only max.txt added", changes)
	}
}

// TestMaxPaths: a session changes at most 200 paths; a changed path can
// always be saved again, a deletion counts as a change, and forgetting an
// edit makes room.
func TestMaxPaths(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	for i := range MaxPaths - 1 {
		if _, err := f.save(sess, fmt.Sprintf("new/%03d.txt", i), "x", Precondition{}); err != nil {
			t.Fatalf("path %d: %v", i, err)
		}
	}
	if err := f.sessions.Delete(f.ctx, sess, "src/main.go", Precondition{}); err != nil {
		t.Fatalf("the 200th path, a deletion: %v", err)
	}
	if _, err := f.save(sess, "one-more.txt", "x", Precondition{}); !errors.Is(err, ErrTooManyPaths) {
		t.Fatalf("the 201st path: %v, want ErrTooManyPaths", err)
	}
	if err := f.sessions.Delete(f.ctx, sess, "crlf.txt", Precondition{}); !errors.Is(err, ErrTooManyPaths) {
		t.Fatalf("deleting a 201st path: %v, want ErrTooManyPaths", err)
	}
	if _, err := f.save(sess, "new/000.txt", "again", Precondition{}); err != nil {
		t.Fatalf("saving a changed path again at the limit: %v", err)
	}
	if err := f.sessions.Delete(f.ctx, sess, "new/001.txt", Precondition{}); err != nil {
		t.Fatalf("deleting an added file: %v", err)
	}
	if _, err := f.save(sess, "one-more.txt", "x", Precondition{}); err != nil {
		t.Fatalf("after forgetting one path: %v", err)
	}
	if changes, err := f.sessions.Changes(f.ctx, sess); err != nil || len(changes) != MaxPaths {
		t.Fatalf("%d changes, %v; want %d", len(changes), err, MaxPaths)
	}
}

// TestStaleWrites: a write whose If-Match or If-None-Match no longer holds
// is refused and changes nothing.
func TestStaleWrites(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	loaded, err := f.sessions.Read(f.ctx, sess, "src/main.go")
	if err != nil {
		t.Fatal(err)
	}
	tabA, err := f.save(sess, "src/main.go", "package main // A\n", Precondition{IfMatch: loaded.ETag})
	if err != nil {
		t.Fatal(err)
	}
	f.advance(time.Minute)
	if _, err := f.save(sess, "src/main.go", "package main // B\n", Precondition{IfMatch: loaded.ETag}); !errors.Is(err, ErrStale) {
		t.Fatalf("the second tab's save with the old ETag: %v, want ErrStale", err)
	}
	// A refused save is still the person at work: the session saw them.
	if cs, err := f.store.SessionByID(f.ctx, sess.ID); err != nil || !cs.LastSeenAt.Equal(f.clock().Truncate(time.Microsecond)) {
		t.Errorf("after a refused save the session was last seen at %v (%v), want %v", cs.LastSeenAt, err, f.clock())
	}
	if err := f.sessions.Delete(f.ctx, sess, "src/main.go", Precondition{IfMatch: loaded.ETag}); !errors.Is(err, ErrStale) {
		t.Fatalf("delete with the old ETag: %v, want ErrStale", err)
	}
	if got, _ := f.sessions.Read(f.ctx, sess, "src/main.go"); got == nil || got.ETag != tabA {
		t.Fatalf("a refused write changed the file: %+v", got)
	}
	if _, err := f.save(sess, "src/main.go", "x", Precondition{IfNoneMatch: "*"}); !errors.Is(err, ErrStale) {
		t.Errorf("If-None-Match * on an existing file: %v, want ErrStale", err)
	}
	if _, err := f.save(sess, "fresh.txt", "x", Precondition{IfMatch: "*"}); !errors.Is(err, ErrStale) {
		t.Errorf("If-Match * on a missing file: %v, want ErrStale", err)
	}
	if _, err := f.save(sess, "fresh.txt", "x", Precondition{IfNoneMatch: "*"}); err != nil {
		t.Errorf("If-None-Match * on a missing file: %v", err)
	}
	if _, err := f.save(sess, "src/main.go", "package main // C\n", Precondition{IfMatch: tabA}); err != nil {
		t.Errorf("save with the current ETag: %v", err)
	}
}

// TestOnlyTheOwnerGetsTheSession: another member, even the project's
// owner by role, sees no such session.
func TestOnlyTheOwnerGetsTheSession(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	bob := &models.User{Username: "bob", PasswordHash: "unused"}
	if err := f.store.CreateUser(f.ctx, bob); err != nil {
		t.Fatal(err)
	}
	other := &projects.Access{Project: f.owner.Project, User: bob, Role: auth.RoleOwner}
	if _, err := f.sessions.Get(f.ctx, other, sess.ID, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob gets ann's session: %v, want ErrNotFound", err)
	}
	if _, err := f.sessions.Get(f.ctx, f.owner, "edit_00000000000000000000000000000000", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("a made-up id: %v, want ErrNotFound", err)
	}
	if _, _, err := f.sessions.Save(f.ctx, other, sess.ID, "a.txt", []byte("x"), Precondition{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob saves into ann's session: %v, want ErrNotFound", err)
	}
	demoted := &projects.Access{Project: f.owner.Project, User: f.owner.User, Role: auth.RoleMember}
	if got, _, err := f.sessions.Save(f.ctx, demoted, sess.ID, "a.txt", []byte("x"), Precondition{}); !errors.Is(err, auth.ErrForbidden) || got != nil {
		t.Errorf("a save by an owner who may no longer edit: %v, %v; want ErrForbidden", got, err)
	}
	if changes, err := f.sessions.Changes(f.ctx, sess); err != nil || len(changes) != 0 {
		t.Errorf("refused saves changed %v (%v)", changes, err)
	}
}

// gone asserts that the session ended for reason and left nothing behind:
// its fork and its edits are gone and a write is refused.
func (f *fixture) gone(sess *Session, err error, reason string) {
	f.t.Helper()
	var g *GoneError
	if !errors.As(err, &g) || g.Reason != reason {
		f.t.Fatalf("got %v, want the session gone for %s", err, reason)
	}
	if _, err := f.git.OpenBare(forkName(sess.ID)); !errors.Is(err, gitsvc.ErrNotFound) {
		f.t.Errorf("the fork outlived its session: %v", err)
	}
	if edits, err := f.store.SessionFiles(f.ctx, sess.ID); err != nil || len(edits) != 0 {
		f.t.Errorf("edits outlived their session: %d, %v", len(edits), err)
	}
	if _, err := f.save(sess, "late.txt", "x", Precondition{}); !errors.As(err, &g) {
		f.t.Errorf("a save in an ended session: %v, want GoneError", err)
	}
}

// TestEnds: a session ends on discard, when idle too long, at its maximum
// age and when its project is archived; an open session then starts fresh.
func TestEnds(t *testing.T) {
	t.Run("discard", func(t *testing.T) {
		f := newFixture(t)
		sess := f.open()
		f.save(sess, "a.txt", "a", Precondition{})
		if err := f.sessions.Discard(f.ctx, sess); err != nil {
			t.Fatal(err)
		}
		_, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true)
		f.gone(sess, err, ReasonDiscarded)
		if again := f.open(); again.ID == sess.ID {
			t.Error("a discarded session was opened again")
		}
	})
	t.Run("idle", func(t *testing.T) {
		f := newFixture(t)
		sess := f.open()
		f.save(sess, "a.txt", "a", Precondition{})
		f.advance(DefaultConfig.Idle - time.Second)
		if _, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true); err != nil {
			t.Fatalf("a second before the idle limit: %v", err)
		}
		f.advance(DefaultConfig.Idle)
		_, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true)
		f.gone(sess, err, ReasonIdle)
	})
	t.Run("max age", func(t *testing.T) {
		f := newFixture(t)
		sess := f.open()
		for elapsed := time.Duration(0); elapsed < DefaultConfig.MaxAge-5*time.Minute; elapsed += 5 * time.Minute {
			f.advance(5 * time.Minute)
			if _, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true); err != nil {
				t.Fatalf("a busy session after %v: %v", elapsed, err)
			}
		}
		f.advance(5 * time.Minute)
		_, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true)
		f.gone(sess, err, ReasonMaxAge)
	})
	t.Run("archived pauses", func(t *testing.T) {
		f := newFixture(t)
		sess := f.open()
		if _, err := f.save(sess, "src/main.go", "package main // edited\n", Precondition{}); err != nil {
			t.Fatal(err)
		}
		archivedAt := f.clock()
		if err := f.store.ArchiveProject(f.ctx, f.owner.Project.ID, archivedAt); err != nil {
			t.Fatal(err)
		}
		p, err := f.store.ProjectByID(f.ctx, f.owner.Project.ID)
		if err != nil {
			t.Fatal(err)
		}
		f.owner.Project = p
		// Paused past both limits: no request and no sweep ends it.
		f.advance(DefaultConfig.MaxAge + DefaultConfig.Idle)
		if n, err := f.sessions.Sweep(f.ctx); err != nil || n != 0 {
			t.Fatalf("the sweep ended %d sessions of an archived project (%v)", n, err)
		}
		paused, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true)
		if err != nil {
			t.Fatalf("a paused session: %v", err)
		}
		if got := f.text(paused, "src/main.go"); got != "package main // edited\n" {
			t.Fatalf("a paused session reads %q", got)
		}
		// It takes no change.
		if _, err := f.save(sess, "src/main.go", "lost\n", Precondition{}); !errors.Is(err, projects.ErrArchived) {
			t.Fatalf("saving in a paused session: %v", err)
		}
		if _, err := f.sessions.Create(f.ctx, paused, "new.txt"); !errors.Is(err, projects.ErrArchived) {
			t.Fatalf("a new file in a paused session: %v", err)
		}
		if err := f.sessions.Revert(f.ctx, paused, "src/main.go"); !errors.Is(err, projects.ErrArchived) {
			t.Fatalf("reverting in a paused session: %v", err)
		}

		// Unarchived, it resumes with the age it had left and a fresh idle
		// limit, its edit as it was.
		err = f.store.Tx(f.ctx, func(tx *models.Store) error {
			since, ok, err := tx.UnarchiveProject(f.ctx, f.owner.Project.ID)
			if err != nil || !ok || since.Sub(archivedAt).Abs() > time.Millisecond {
				return fmt.Errorf("unarchive: since %v, ok %v, %w", since, ok, err)
			}
			return f.sessions.ResumeProjectSessions(f.ctx, tx, f.owner.Project.ID, since)
		})
		if err != nil {
			t.Fatal(err)
		}
		if p, err = f.store.ProjectByID(f.ctx, f.owner.Project.ID); err != nil {
			t.Fatal(err)
		}
		f.owner.Project = p
		resumed, err := f.sessions.Get(f.ctx, f.owner, sess.ID, true)
		if err != nil {
			t.Fatalf("after the unarchive: %v", err)
		}
		if left := resumed.MaxDeadline.Sub(f.clock()); (left - DefaultConfig.MaxAge).Abs() > time.Millisecond {
			t.Fatalf("after the unarchive %v of age are left, want the %v it had", left, DefaultConfig.MaxAge)
		}
		if _, err := f.save(sess, "src/main.go", "package main // again\n", Precondition{}); err != nil {
			t.Fatalf("saving after the unarchive: %v", err)
		}
		f.advance(DefaultConfig.Idle + time.Second)
		_, err = f.sessions.Get(f.ctx, f.owner, sess.ID, true)
		f.gone(sess, err, ReasonIdle)
	})
	t.Run("sweep", func(t *testing.T) {
		f := newFixture(t)
		sess := f.open()
		if n, err := f.sessions.Sweep(f.ctx); err != nil || n != 0 {
			t.Fatalf("sweeping a live session: %d, %v", n, err)
		}
		f.advance(DefaultConfig.Idle + time.Second)
		if n, err := f.sessions.Sweep(f.ctx); err != nil || n != 1 {
			t.Fatalf("sweeping an idle session: %d, %v", n, err)
		}
		_, err := f.sessions.Get(f.ctx, f.owner, sess.ID, false)
		f.gone(sess, err, ReasonIdle)
	})
}
