package search

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"atelier/gitsvc"
	"atelier/storage"
	"atelier/storage/codestore"
	"atelier/testrig/dbtest"
)

// The benchmarks search a generated repository of 100,000 files (50 top
// folders × 100 subfolders × 20 files of 12 lines, 21 MB), published into
// a local object store as canonical trees are, and compare with git grep
// run on its own in the same run:
//
//	go test -run '^$' -bench . -benchtime 5x ./search
//
// "first-ms" is the time until the first file's matches are handed on,
// what a person waits before the page shows something.
const (
	benchDirs, benchSubdirs, benchFiles = 50, 100, 20
	benchRare                           = "zebracorn" // in 50 files spread through the tree
)

func benchContent(d, s, f int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package p%03d\n\n// f%03d computes things for s%03d.\n", d, f, s)
	for i := 0; i < 3; i++ {
		fmt.Fprintf(&b, "func f%d_%d(x int) int {\n\treturn x*%d + %d // step %d\n}\n", f, i, d+i, s, i)
	}
	if s%10 == 0 && f == 7 && d%10 == 0 {
		b.WriteString("// a zebracorn was here\n")
	}
	return b.String()
}

type benchTree struct {
	git   *gitsvc.Service
	store *codestore.Store
	src   codestore.Source
}

func newBenchTree(b *testing.B) *benchTree {
	b.Helper()
	ctx := context.Background()
	git, err := gitsvc.New(gitsvc.Config{Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	repo, first, err := git.CreateCanonical(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	var in bytes.Buffer
	fmt.Fprintf(&in, "commit refs/heads/main\ncommitter Bench <bench@localhost> 1700000000 +0000\ndata 5\nbench\nfrom %s\ndeleteall\n", first)
	for d := 0; d < benchDirs; d++ {
		for s := 0; s < benchSubdirs; s++ {
			for f := 0; f < benchFiles; f++ {
				c := benchContent(d, s, f)
				fmt.Fprintf(&in, "M 100644 inline d%03d/s%03d/f%03d.go\ndata %d\n%s\n", d, s, f, len(c), c)
			}
		}
	}
	cmd := exec.Command("git", "--git-dir", repo.GitDir, "fast-import", "--quiet")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("fast-import: %v %s", err, out)
	}
	out, err := exec.Command("git", "--git-dir", repo.GitDir, "rev-parse", "refs/heads/main").Output()
	if err != nil {
		b.Fatal(err)
	}
	commit := strings.TrimSpace(string(out))
	objects, err := storage.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	store, err := codestore.New(objects, git, dbtest.Store(b), slog.New(slog.DiscardHandler), codestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := store.Publish(ctx, repo, commit); err != nil {
		b.Fatal(err)
	}
	return &benchTree{git: git, store: store, src: codestore.Source{Repo: repo, Commit: commit}}
}

// run searches the tree once and says when the first file came and how
// many lines the answer holds.
func (t *benchTree) run(b *testing.B, q Query) (first time.Duration, sum Summary) {
	m, err := Compile(q)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	sum, err = Run(context.Background(), m, Git(t.git, t.store, t.src, nil, nil), func(File) error {
		if first == 0 {
			first = time.Since(start)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return first, sum
}

// gitGrep runs git grep alone and says when its first line came and how
// many it wrote.
func (t *benchTree) gitGrep(b *testing.B, args ...string) (first time.Duration, lines int) {
	start := time.Now()
	cmd := exec.Command("git", append([]string{"--git-dir", t.src.Repo.GitDir, "grep", "-I", "-n"}, append(args, t.src.Commit, "--")...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if lines == 0 {
			first = time.Since(start)
		}
		lines++
	}
	cmd.Wait()
	return first, lines
}

// BenchmarkHostilePatterns is what one line of a megabyte costs each
// pattern that would make a backtracking engine run for ever.
func BenchmarkHostilePatterns(b *testing.B) {
	line := bytes.Repeat([]byte("a"), MaxFileBytes-1)
	for _, p := range hostilePatterns {
		m, err := Compile(Query{Text: p, Regex: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p, func(b *testing.B) {
			for b.Loop() {
				m.Text("f", line)
			}
		})
	}
}

func BenchmarkSearch(b *testing.B) {
	t := newBenchTree(b)
	report := func(b *testing.B, firsts []time.Duration) {
		var sum time.Duration
		for _, f := range firsts {
			sum += f
		}
		b.ReportMetric(float64(sum.Microseconds())/float64(len(firsts))/1000, "first-ms")
	}
	for _, c := range []struct {
		name  string
		q     Query
		lines int
	}{
		{"rare-literal", Query{Text: benchRare}, 50},
		{"common-literal-capped", Query{Text: "return"}, MaxMatches},
		{"regex", Query{Text: `func f1\d_2\(`, Regex: true, Case: true}, MaxMatches},
		{"regex-rare-no-literal", Query{Text: `\d{4}`, Regex: true}, 0},
	} {
		b.Run("search-"+c.name, func(b *testing.B) {
			var firsts []time.Duration
			for b.Loop() {
				first, sum := t.run(b, c.q)
				if sum.Matches != c.lines || sum.TimedOut {
					b.Fatalf("%d lines, timed out %v; want %d", sum.Matches, sum.TimedOut, c.lines)
				}
				if c.lines > 0 {
					firsts = append(firsts, first)
				}
			}
			if len(firsts) > 0 {
				report(b, firsts)
			}
		})
	}
	b.Run("git-grep-rare-literal", func(b *testing.B) {
		var firsts []time.Duration
		for b.Loop() {
			first, n := t.gitGrep(b, "-i", "-F", "-e", benchRare)
			if n != 50 {
				b.Fatalf("%d lines", n)
			}
			firsts = append(firsts, first)
		}
		report(b, firsts)
	})
	b.Run("git-grep-common-literal", func(b *testing.B) {
		var firsts []time.Duration
		for b.Loop() {
			first, n := t.gitGrep(b, "-i", "-F", "-e", "return")
			if n != 300_000 {
				b.Fatalf("%d lines", n)
			}
			firsts = append(firsts, first)
		}
		report(b, firsts)
	})
}
