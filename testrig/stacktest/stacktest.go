// Package stacktest builds, for the package tests of the domain packages,
// the services they stand on, from real parts: a fresh migrated database,
// the git service, a local object store with its code store, and the
// workspaces, everything below one temporary folder.
package stacktest

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/dbtest"
	"atelier/workspace"
)

// Stack is what the domain services are built from.
type Stack struct {
	Dir  string // every file the stack writes lives below
	DB   *models.Store
	Git  *gitsvc.Service
	Code *codestore.Store
	WS   *workspace.Workspaces
	Log  *slog.Logger
}

// New builds a Stack whose files go away with the test. Git gets a
// generous timeout: these machines run many tests at once.
func New(t testing.TB) *Stack {
	t.Helper()
	s := &Stack{Dir: t.TempDir(), DB: dbtest.Store(t), Log: slog.New(slog.DiscardHandler)}
	var err error
	if s.Git, err = gitsvc.New(gitsvc.Config{Root: filepath.Join(s.Dir, "git"), Timeout: 5 * time.Minute, Log: s.Log}); err != nil {
		t.Fatal(err)
	}
	objects, err := storage.NewLocal(filepath.Join(s.Dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Code, err = codestore.New(objects, s.Git, s.DB, s.Log, codestore.Options{CachedTrees: 100}); err != nil {
		t.Fatal(err)
	}
	if s.WS, err = workspace.New(filepath.Join(s.Dir, "workspaces"), []string{filepath.Join(s.Dir, "data")}, workspace.LocalPolicy{}, s.Log); err != nil {
		t.Fatal(err)
	}
	return s
}
