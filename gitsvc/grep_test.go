package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// grepped is what a Grep handed over, one "path:line:text" a line.
func grepped(t *testing.T, s *Service, r *Repo, commit string, o GrepOptions) []string {
	t.Helper()
	var got []string
	err := s.Grep(testContext(t), r, commit, o, func(l GrepLine) error {
		long := ""
		if l.Long {
			long = " (long)"
		}
		got = append(got, fmt.Sprintf("%s:%d:%s%s", l.Path, l.Line, l.Text, long))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Grep hands over every line holding one of the strings, in path order,
// with names of any byte read whole, binary files passed over, strings
// that look like options taken as strings, long lines cut and marked.
func TestGrepFindsLinesInPathOrder(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	files := map[string]string{
		"a-b":           "x\n-rf here\n",
		"a.b":           "nothing\n",
		"a/one.txt":     "needle\r\nhay\nNEEDLE and needle\n",
		"new\nline.txt": "a needle\n",
		"bin.dat":       "needle\x00\n",
		"late-nul.txt":  strings.Repeat("y", 8100) + "\x00needle\n",
		"long.txt":      "needle" + strings.Repeat("z", 100) + "\nneedle\n",
		"meta.txt":      "a.b|(c\naxb|c\n[x]^$\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	commit, err := s.CommitTree(ctx, r, dir, []string{first}, "fixture\n")
	if err != nil {
		t.Fatal(err)
	}

	got := grepped(t, s, r, commit, GrepOptions{Fixed: []string{"needle", "-rf"}, MaxLine: 50})
	want := []string{
		"a-b:2:-rf here",
		"a/one.txt:1:needle\r",
		"a/one.txt:3:NEEDLE and needle",
		"late-nul.txt:1:" + strings.Repeat("y", 50) + " (long)", // a NUL past 8,000 bytes is text to git
		"long.txt:1:needle" + strings.Repeat("z", 44) + " (long)",
		"long.txt:2:needle",
		"new\nline.txt:1:a needle",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Grep =\n%q\nwant\n%q", got, want)
	}

	if got := grepped(t, s, r, commit, GrepOptions{Fixed: []string{"NeEdLe"}, IgnoreCase: true}); len(got) != 6 || got[1] != "a/one.txt:3:NEEDLE and needle" {
		t.Errorf("ignoring case: %d lines, the second %.40q", len(got), got[min(1, len(got)-1)])
	}
	if got := grepped(t, s, r, commit, GrepOptions{}); len(got) != 13 {
		t.Errorf("no strings gave %d lines, want every line of the text files (13): %.300q", len(got), got)
	}
	// Several strings are one extended expression for git, each quoted.
	meta := grepped(t, s, r, commit, GrepOptions{Fixed: []string{"a.b|(c", "[x]^$", "qqq"}})
	if strings.Join(meta, "|") != "meta.txt:1:a.b|(c|meta.txt:3:[x]^$" {
		t.Errorf("strings with the expression's characters: %q", meta)
	}
	if got := grepped(t, s, r, commit, GrepOptions{Fixed: []string{"absent"}}); len(got) != 0 {
		t.Errorf("a string no file holds: %q", got)
	}

	n := 0
	err = s.Grep(ctx, r, commit, GrepOptions{Fixed: []string{"needle"}}, func(GrepLine) error {
		n++
		return ErrStopGrep
	})
	if err != nil || n != 1 {
		t.Errorf("a stop after the first line: %d lines, %v", n, err)
	}
	boom := errors.New("boom")
	if err := s.Grep(ctx, r, commit, GrepOptions{Fixed: []string{"needle"}}, func(GrepLine) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("the callback's error: %v", err)
	}

	for _, bad := range [][]string{{""}, {"a\nb"}, {"a\x00"}} {
		if err := s.Grep(ctx, r, commit, GrepOptions{Fixed: bad}, func(GrepLine) error { return nil }); !errors.Is(err, ErrBadArgument) {
			t.Errorf("Grep(%q): %v, want ErrBadArgument", bad, err)
		}
	}
	for _, rev := range []string{"main", "--output=/tmp/x", commit[:12]} {
		if err := s.Grep(ctx, r, rev, GrepOptions{Fixed: []string{"x"}}, func(GrepLine) error { return nil }); !errors.Is(err, ErrBadArgument) {
			t.Errorf("Grep at %q: %v, want ErrBadArgument", rev, err)
		}
	}
}

// A grep that outlives its context is killed and says so.
func TestGrepStopsAtItsDeadline(t *testing.T) {
	slow := script(t, `cat >/dev/null; sleep 5`)
	s := newService(t, withGit(slow))
	dir := realDir(t)
	if err := os.MkdirAll(filepath.Join(dir, "r.git"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Repo{GitDir: filepath.Join(dir, "r.git")}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Grep(ctx, r, strings.Repeat("a", 40), GrepOptions{Fixed: []string{"x"}}, func(GrepLine) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("Grep past its deadline: %v after %s", err, time.Since(start))
	}
}
