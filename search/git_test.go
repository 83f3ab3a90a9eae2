package search

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

	"atelier/gitsvc"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/dbtest"
)

// A file's matches are handed on as soon as git has written them, not
// when the next file begins or git ends: here git writes its one file at
// once and then holds its output open for three seconds, and the file
// arrives well before.
func TestGitHandsFilesOnAsGitWritesThem(t *testing.T) {
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	slow := filepath.Join(dir, "git")
	script := fmt.Sprintf("#!/bin/sh\ncase \" $* \" in *\" grep \"*) %q \"$@\"; s=$?; sleep 3; exit $s;; esac\nexec %q \"$@\"\n", real, real)
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	git, err := gitsvc.New(gitsvc.Config{Root: filepath.Join(dir, "repos"), GitPath: slow})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	repo, first, err := git.CreateCanonical(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter T <t@localhost> 1700000000 +0000\ndata 1\nx\nfrom %s\n", first)
	for _, f := range []struct{ path, body string }{{"a.txt", "needle\n"}, {"b.txt", "no\n"}, {"c/d.txt", "none\n"}} {
		fmt.Fprintf(&in, "M 100644 inline %s\ndata %d\n%s\n", f.path, len(f.body), f.body)
	}
	cmd := exec.Command(real, "--git-dir", repo.GitDir, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fast-import: %v %s", err, out)
	}
	out, err := exec.Command(real, "--git-dir", repo.GitDir, "rev-parse", "refs/heads/main").Output()
	if err != nil {
		t.Fatal(err)
	}
	objects, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store, err := codestore.New(objects, git, dbtest.Store(t), slog.New(slog.DiscardHandler), codestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Compile(Query{Text: "needle"})
	if err != nil {
		t.Fatal(err)
	}
	src := codestore.Source{Repo: repo, Commit: strings.TrimSpace(string(out))}
	start := time.Now()
	var arrived []time.Duration
	var paths []string
	sum, err := Run(ctx, m, Git(git, store, src, nil, nil), func(f File) error {
		arrived = append(arrived, time.Since(start))
		paths = append(paths, f.Path)
		return nil
	})
	total := time.Since(start)
	if err != nil || sum.Matches != 1 || strings.Join(paths, " ") != "a.txt" {
		t.Fatalf("search: %+v %v, files %q", sum, err, paths)
	}
	if total < 3*time.Second || arrived[0] > 1500*time.Millisecond {
		t.Fatalf("the first file came after %s of a search that took %s", arrived[0], total)
	}
}
