package codestore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/dbtest"
)

// file is one path and its content in a generated commit.
type file struct{ path, content string }

// fastImport writes a commit with files onto refs/heads/main of the bare
// repository, on top of parent, in one git fast-import process. With
// replace, the commit's tree is exactly files; without, files change the
// parent's tree.
func fastImport(tb testing.TB, repo *gitsvc.Repo, parent string, files []file, replace bool) string {
	tb.Helper()
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter Fixture <fixture@localhost> 1700000000 +0000\ndata 7\nfixture\nfrom %s\n", parent)
	if replace {
		in.WriteString("deleteall\n")
	}
	for _, f := range files {
		fmt.Fprintf(&in, "M 100644 inline %s\ndata %d\n%s\n", f.path, len(f.content), f.content)
	}
	cmd := exec.Command("git", "--git-dir", repo.GitDir, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("fast-import: %v\n%s", err, out)
	}
	out, err := exec.Command("git", "--git-dir", repo.GitDir, "rev-parse", "refs/heads/main").Output()
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// tree makes dirs × subdirs × perDir files named d000/s000/f000.txt.
func tree(dirs, subdirs, perDir int) []file {
	files := make([]file, 0, dirs*subdirs*perDir)
	for d := 0; d < dirs; d++ {
		for s := 0; s < subdirs; s++ {
			for f := 0; f < perDir; f++ {
				p := fmt.Sprintf("d%03d/s%03d/f%03d.txt", d, s, f)
				files = append(files, file{p, "content of " + p + "\n"})
			}
		}
	}
	return files
}

// env is a code store over a real database, git and object store.
type env struct {
	git     *gitsvc.Service
	db      *models.Store
	dsn     string // the database's, for what a test reads past models
	objects storage.ObjectStore
	repo    *gitsvc.Repo
	first   string
	log     *slog.Logger
}

func newEnv(tb testing.TB, objects storage.ObjectStore) *env {
	tb.Helper()
	git, err := gitsvc.New(gitsvc.Config{Root: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	repo, first, err := git.CreateCanonical(context.Background(), "fixture")
	if err != nil {
		tb.Fatal(err)
	}
	dsn := dbtest.DSN(tb)
	db, err := models.Open(context.Background(), dsn, models.DefaultPool)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return &env{git: git, db: db, dsn: dsn, objects: objects, repo: repo, first: first,
		log: slog.New(slog.DiscardHandler)}
}

// store returns a code store with an empty cache, as after a restart.
func (e *env) store(tb testing.TB) *codestore.Store {
	tb.Helper()
	s, err := codestore.New(e.objects, e.git, e.db, e.log, codestore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func localObjects(tb testing.TB) storage.ObjectStore {
	tb.Helper()
	l, err := storage.NewLocal(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
