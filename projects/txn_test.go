package projects_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"atelier/models"
	"atelier/projects"
	"atelier/testrig/stacktest"
	"atelier/testrig/txwatchtest"
	"atelier/workspace"
)

// TestCreateCallsNoGitInsideATransaction: a Container project's folder and
// canonical repository are made before the short transaction that counts
// the person's creations under their row lock and writes the row, which
// then holds the first commit from the start. When the row cannot be
// written after them, the folder and the repository go again. The watch
// (txwatch) names any git, object store or sandbox call made while a
// transaction of the request is open.
func TestCreateCallsNoGitInsideATransaction(t *testing.T) {
	st := stacktest.New(t)
	svc := projects.NewService(projects.Options{Store: st.DB, Workspace: st.WS, Git: st.Git, Code: st.Code,
		Now: time.Now, Log: st.Log})
	u := &models.User{Username: "maker", PasswordHash: "x"}
	if err := st.DB.CreateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	repoDir := func(id int64) string { return filepath.Join(st.Dir, "git", projects.CanonicalName(id)+".git") }
	folder := func(name string, id int64) string {
		return filepath.Join(st.Dir, "workspaces", workspace.DirNameFor(name, id))
	}

	ctx, w := txwatchtest.Attach(context.Background())
	p, err := svc.Create(ctx, u, projects.CreateInput{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("a creation called %q inside a transaction", in)
	}
	if !slices.Contains(w.Seen(), "git init") {
		t.Fatalf("the creation made no repository through git: %q", w.Seen())
	}
	row, err := st.DB.ProjectByID(context.Background(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "--git-dir", repoDir(p.ID), "rev-parse", "refs/heads/main").Output()
	if err != nil || row.CanonicalCommit == nil || *row.CanonicalCommit != strings.TrimSpace(string(out)) {
		t.Fatalf("the row records canonical at %v, the repository is at %q (%v)", row.CanonicalCommit, out, err)
	}
	if fi, err := os.Stat(folder("app", p.ID)); err != nil || !fi.IsDir() {
		t.Fatalf("the project's folder: %v", err)
	}

	// Rows written past every check hold the folder names of the next
	// three ids, so each try makes a folder and a repository whose row
	// cannot be written: none of them is left on disk.
	var last int64
	if err := st.DB.Tx(context.Background(), func(tx *models.Store) error {
		last, err = tx.NextProjectID(context.Background())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		if err := st.DB.Exec(context.Background(), `INSERT INTO projects (id, name, workspace_dir_name) VALUES (?, 'squatter', ?)`,
			1_000_000+i, workspace.DirNameFor("blocked", last+i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, w = txwatchtest.Attach(context.Background())
	if _, err := svc.Create(ctx, u, projects.CreateInput{Name: "blocked"}); err == nil {
		t.Fatal("a creation whose every row is refused succeeded")
	}
	if in := w.InTx(); len(in) > 0 {
		t.Errorf("a refused creation called %q inside a transaction", in)
	}
	for i := int64(1); i <= 3; i++ {
		for _, left := range []string{folder("blocked", last+i), repoDir(last + i)} {
			if _, err := os.Lstat(left); !os.IsNotExist(err) {
				t.Errorf("%s outlived a row that was never written: %v", left, err)
			}
		}
	}
	if n := strings.Count(strings.Join(w.Seen(), "\n"), "git init"); n != 3 {
		t.Fatalf("%d repositories made for three tries, want 3: the test no longer makes them before the row", n)
	}
}
