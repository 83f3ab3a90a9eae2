package codestore_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"atelier/storage/codestore"
)

// The benchmarks run on a generated repository of 100,000 files in 5,000
// folders (50 top folders × 100 subfolders × 20 files), published into a
// local object store. Each compares the code store with spawning git for the
// same answer in the same run:
//
//	go test -run '^$' -bench . -benchtime 2s ./storage/codestore
const (
	benchDirs, benchSubdirs, benchFiles = 50, 100, 20
	benchFolder                         = "d025/s050"
	benchFile                           = "d025/s050/f010.txt"
)

type benchRepo struct {
	*env
	commit string
	src    codestore.Source
}

func newBenchRepo(b *testing.B) *benchRepo {
	b.Helper()
	e := newEnv(b, localObjects(b))
	commit := fastImport(b, e.repo, e.first, tree(benchDirs, benchSubdirs, benchFiles), true)
	return &benchRepo{env: e, commit: commit, src: codestore.Source{Repo: e.repo, Commit: commit}}
}

func (r *benchRepo) publish(b *testing.B) {
	b.Helper()
	if _, err := r.store(b).Publish(context.Background(), r.repo, r.commit); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkListFolder(b *testing.B) {
	r := newBenchRepo(b)
	r.publish(b)
	ctx := context.Background()

	b.Run("codestore-warm", func(b *testing.B) {
		s := r.store(b)
		if _, err := s.List(ctx, r.src, benchFolder); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if es, err := s.List(ctx, r.src, benchFolder); err != nil || len(es) != benchFiles {
				b.Fatalf("%d entries, %v", len(es), err)
			}
		}
	})
	b.Run("codestore-cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s := r.store(b) // empty cache: root, d025 and d025/s050 come from the object store
			b.StartTimer()
			if es, err := s.List(ctx, r.src, benchFolder); err != nil || len(es) != benchFiles {
				b.Fatalf("%d entries, %v", len(es), err)
			}
		}
	})
	b.Run("git-ls-tree", func(b *testing.B) {
		for b.Loop() {
			out, err := exec.Command("git", "--git-dir", r.repo.GitDir, "ls-tree", "-l", r.commit, benchFolder+"/").Output()
			if err != nil || len(out) == 0 {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadFile(b *testing.B) {
	r := newBenchRepo(b)
	r.publish(b)
	ctx := context.Background()
	s := r.store(b)
	b.Run("codestore", func(b *testing.B) {
		for b.Loop() {
			if data, _, err := s.Read(ctx, r.src, benchFile, 1<<20); err != nil || len(data) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("git-cat-file", func(b *testing.B) {
		for b.Loop() {
			out, err := exec.Command("git", "--git-dir", r.repo.GitDir, "cat-file", "blob", r.commit+":"+benchFile).Output()
			if err != nil || len(out) == 0 {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPublish(b *testing.B) {
	b.Run("first-100k-files", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			r := newBenchRepo(b)
			b.StartTimer()
			r.publish(b)
		}
	})
	b.Run("incremental-10-files", func(b *testing.B) {
		r := newBenchRepo(b)
		r.publish(b)
		parent := r.commit
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			var changed []file
			for f := 0; f < 10; f++ {
				p := fmt.Sprintf("d%03d/s%03d/f%03d.txt", f*5, i%benchSubdirs, f)
				changed = append(changed, file{p, fmt.Sprintf("edit %d of %s\n", i, p)})
			}
			parent = fastImport(b, r.repo, parent, changed, false)
			b.StartTimer()
			st, err := r.store(b).Publish(context.Background(), r.repo, parent)
			if err != nil || st.Blobs != 10 {
				b.Fatalf("%+v %v", st, err)
			}
		}
	})
}

// BenchmarkQuickOpen answers a fuzzy query over all 100,000 paths: from the
// index in memory, from the index loaded out of the object store (a fresh
// instance), and as `git ls-tree -r --name-only | grep` would (the canonical
// repository is bare, so ls-tree stands in for ls-files), which only filters
// by a fixed pattern and ranks nothing.
func BenchmarkQuickOpen(b *testing.B) {
	r := newBenchRepo(b)
	r.publish(b)
	ctx := context.Background()
	const query, want = "d25s50f10", benchFile
	check := func(b *testing.B, ms []codestore.Match) {
		if len(ms) == 0 || ms[0].Path != want {
			b.Fatalf("first result %v, want %s", ms, want)
		}
	}
	b.Run("codestore-warm", func(b *testing.B) {
		s := r.store(b)
		if _, err := s.Index(ctx, r.src); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			ix, err := s.Index(ctx, r.src)
			if err != nil {
				b.Fatal(err)
			}
			check(b, ix.Find(query, 50))
		}
	})
	b.Run("codestore-cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			s := r.store(b)
			b.StartTimer()
			ix, err := s.Index(ctx, r.src)
			if err != nil {
				b.Fatal(err)
			}
			check(b, ix.Find(query, 50))
		}
	})
	b.Run("git-ls-tree-grep", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("sh", "-c", `git --git-dir "$1" ls-tree -r --name-only "$2" | grep -i "$3"`,
				"sh", r.repo.GitDir, r.commit, benchFolder+"/f010")
			if out, err := cmd.Output(); err != nil || len(out) == 0 {
				b.Fatal(err)
			}
		}
	})
}
