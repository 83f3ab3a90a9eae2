package codestore_test

import (
	"context"
	"io"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"atelier/gitsvc"
	"atelier/storage/codestore"
)

func paths(ms []codestore.Match) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Path
	}
	return out
}

// The matcher takes a query's characters in order, ranks a match in the
// file's name and at word starts over one scattered through folders, and
// marks where it matched.
func TestFindRanksFuzzyMatches(t *testing.T) {
	ix := codestore.NewIndex([]string{
		"README.md",
		"cmd/server/main.go",
		"docs/manual/install.md",
		"handlers/code.go",
		"handlers/codeImport.go",
		"internal/mainframe/a.go",
		"static/app.js",
		"views/templates/pages/code.html",
	})
	cases := []struct {
		query string
		want  []string // the first results, in order
	}{
		{"main", []string{"cmd/server/main.go", "internal/mainframe/a.go"}},
		{"hcode", []string{"handlers/code.go", "handlers/codeImport.go"}},
		{"cimp", []string{"handlers/codeImport.go"}},
		{"CODE.HTML", []string{"views/templates/pages/code.html"}},
		{"rdme", []string{"README.md"}},
		{"zzz", []string{}},
	}
	for _, c := range cases {
		got := paths(ix.Find(c.query, 10))
		if len(got) < len(c.want) || !reflect.DeepEqual(got[:len(c.want)], c.want) {
			t.Errorf("Find(%q) = %v, want it to begin with %v", c.query, got, c.want)
		}
		for _, p := range got {
			if !subsequenceFold(p, c.query) {
				t.Errorf("Find(%q) returned %q, which does not hold the query in order", c.query, p)
			}
		}
	}
	m := ix.Find("main.go", 1)[0]
	if want := []int{11, 12, 13, 14, 15, 16, 17}; !reflect.DeepEqual(m.Positions, want) {
		t.Errorf("positions of main.go in %s = %v, want %v", m.Path, m.Positions, want)
	}
	if got := ix.Find("", 3); len(got) != 3 || got[0].Path != "README.md" {
		t.Errorf("empty query = %v, want the first three paths", paths(got))
	}
	if got := ix.Find("o", 2); len(got) != 2 {
		t.Errorf("limit 2 gave %d results", len(got))
	}
}

// Space-separated terms each match on their own, in any order: "eng wrd"
// finds english/words.txt, which holds no "engwrd" in order when the terms
// are swapped, and a path must hold every term.
func TestFindMatchesSpaceSeparatedTermsInAnyOrder(t *testing.T) {
	ix := codestore.NewIndex([]string{
		"english/grammar.txt",
		"english/words.txt",
		"french/words.txt",
		"words/english.md",
	})
	for _, q := range []string{"eng wrd", "wrd eng", "  wrd   eng ", "WRD Eng"} {
		got := paths(ix.Find(q, 10))
		sort.Strings(got)
		if !reflect.DeepEqual(got, []string{"english/words.txt", "words/english.md"}) {
			t.Errorf("Find(%q) = %v, want english/words.txt and words/english.md", q, got)
		}
	}
	for _, m := range ix.Find("wrd eng", 10) {
		if m.Path != "english/words.txt" {
			continue
		}
		if want := []int{0, 1, 2, 8, 10, 11}; !reflect.DeepEqual(m.Positions, want) {
			t.Errorf("positions of %q in %s = %v, want %v (both terms', in order)", "wrd eng", m.Path, m.Positions, want)
		}
	}
	if got := paths(ix.Find("eng zzz", 10)); len(got) != 0 {
		t.Errorf("a term no path holds still found %v", got)
	}
	if got := ix.Find("   ", 2); len(got) != 2 || got[0].Path != "english/grammar.txt" {
		t.Errorf("a query of spaces = %v, want the first paths, as an empty query", paths(got))
	}
}

func subsequenceFold(s, q string) bool {
	s, q = strings.ToLower(s), strings.ToLower(q)
	j := 0
	for i := 0; i < len(s) && j < len(q); i++ {
		if s[i] == q[j] {
			j++
		}
	}
	return j == len(q)
}

// Publish stores the tree's path index in the object store under the root
// tree's sha; a fresh store (a restart, another instance) answers quick open
// from it with git broken.
func TestIndexIsPublishedBesideTheTree(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	commit := fastImport(t, e.repo, e.first, []file{
		{"README.md", "# hello\n"}, {"src/main.go", "package main\n"}, {"src/util/x.go", "package util\n"},
	}, true)
	if _, err := e.store(t).Publish(ctx, e.repo, commit); err != nil {
		t.Fatal(err)
	}
	root, err := e.db.PublishedRoot(ctx, commit)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := e.objects.Get(ctx, "indexes/"+root)
	if err != nil {
		t.Fatalf("no index stored beside the tree: %v", err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if want := "README.md\x00src/main.go\x00src/util/x.go"; string(data) != want {
		t.Fatalf("stored index %q, want %q", data, want)
	}

	broken, err := gitsvc.New(gitsvc.Config{Root: t.TempDir(), GitPath: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := codestore.New(e.objects, broken, e.db, e.log, codestore.Options{CachedTrees: 10})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := s.Index(ctx, codestore.Source{Repo: e.repo, Commit: commit})
	if err != nil {
		t.Fatalf("index of a published commit with git broken: %v", err)
	}
	if got := paths(ix.Find("utx", 5)); !reflect.DeepEqual(got, []string{"src/util/x.go"}) {
		t.Fatalf("Find(utx) = %v", got)
	}
}

// A commit that is not published (or was published before indexes existed)
// is indexed from git on its first quick open, and the index is stored so
// the next reader does not list the tree again.
func TestIndexOfAnUnpublishedCommitIsBuiltOnce(t *testing.T) {
	e := newEnv(t, localObjects(t))
	ctx := context.Background()
	commit := fastImport(t, e.repo, e.first, tree(2, 3, 4), true)
	ix, err := e.store(t).Index(ctx, codestore.Source{Repo: e.repo, Commit: commit})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != 24 {
		t.Fatalf("index of %d paths, want 24", ix.Len())
	}
	out, err := gitCmd(e.repo, "rev-parse", commit+"^{tree}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.objects.Get(ctx, "indexes/"+strings.TrimSpace(out)); err != nil {
		t.Fatalf("the index built from git was not stored: %v", err)
	}
}

func gitCmd(repo *gitsvc.Repo, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"--git-dir", repo.GitDir}, args...)...).Output()
	return string(out), err
}
