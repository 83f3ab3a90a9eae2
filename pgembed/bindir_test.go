package pgembed

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeServer creates dir holding empty executable postgres and initdb files.
func fakeServer(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"postgres", "initdb"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakePGConfig creates dir/pg_config, a script printing bindir.
func fakePGConfig(t *testing.T, dir, bindir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho '" + bindir + "'\n"
	if err := os.WriteFile(filepath.Join(dir, "pg_config"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"16", "9", 1},
		{"9", "16", -1},
		{"10", "9.6", 1},
		{"9.6", "9.5", 1},
		{"9.6", "9.6", 0},
		{"15", "15beta1", 0}, // same number; the tie is broken by name below
		{"9.6.1", "9.6", 1},
		{"12", "devel", 1},
	}
	for _, tt := range tests {
		got := compareVersions(tt.a, tt.b)
		if tt.want == 0 && tt.a != tt.b {
			// Equal numbers fall back to a name comparison, which must
			// still give a strict order.
			if got == 0 {
				t.Errorf("compareVersions(%q, %q) = 0, want a strict order", tt.a, tt.b)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestNewestFirstSortsNumerically(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.5", "16", "10", "9.6", "15", "devel"} {
		fakeServer(t, filepath.Join(root, v, "bin"))
	}
	var got []string
	for _, dir := range newestFirst(filepath.Join(root, "*", "bin")) {
		got = append(got, filepath.Base(filepath.Dir(dir)))
	}
	want := []string{"16", "15", "10", "9.6", "9.5", "devel"}
	if !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func TestCandidatesOrder(t *testing.T) {
	root := t.TempDir()
	versioned := filepath.Join(root, "lib", "postgresql", "*", "bin")
	v15 := fakeServer(t, filepath.Join(root, "lib", "postgresql", "15", "bin"))
	v16 := fakeServer(t, filepath.Join(root, "lib", "postgresql", "16", "bin"))
	v9 := fakeServer(t, filepath.Join(root, "lib", "postgresql", "9.6", "bin"))
	onPath := fakeServer(t, filepath.Join(root, "opt", "pg", "bin"))

	// A PATH folder with only an initdb link, as /usr/local/bin here.
	linkDir := filepath.Join(root, "links")
	linkTarget := fakeServer(t, filepath.Join(root, "elsewhere", "bin"))
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(linkTarget, "initdb"), filepath.Join(linkDir, "initdb")); err != nil {
		t.Fatal(err)
	}

	goodConfig := filepath.Join(root, "cfg-good")
	fakePGConfig(t, goodConfig, v15)
	badConfig := filepath.Join(root, "cfg-bad")
	fakePGConfig(t, badConfig, filepath.Join(root, "nothing", "here"))
	empty := filepath.Join(root, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		path     []string
		patterns []string
		want     []string
	}{
		{
			name:     "pg_config first, then versions newest first, then PATH",
			path:     []string{goodConfig, onPath},
			patterns: []string{versioned},
			want:     []string{v15, v16, v9, onPath},
		},
		{
			name:     "pg_config naming a folder without the server is skipped",
			path:     []string{badConfig, onPath},
			patterns: []string{versioned},
			want:     []string{v16, v15, v9, onPath},
		},
		{
			name: "PATH alone",
			path: []string{empty, onPath},
			want: []string{onPath},
		},
		{
			name: "initdb linked into PATH leads to the server next to its target",
			path: []string{linkDir},
			want: []string{linkTarget},
		},
		{
			name: "relative PATH entries are ignored",
			path: []string{"."},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "relative PATH entries are ignored" {
				t.Chdir(onPath)
			}
			s := binSearch{path: strings.Join(tt.path, string(os.PathListSeparator)), patterns: tt.patterns}
			var got []string
			for _, c := range s.candidates() {
				got = append(got, c.dir)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("candidates =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

func TestBinDirForPrefersTheDataVersion(t *testing.T) {
	root := t.TempDir()
	v15 := fakeServer(t, filepath.Join(root, "15", "bin"))
	v16 := fakeServer(t, filepath.Join(root, "16", "bin"))
	s := binSearch{patterns: []string{filepath.Join(root, "*", "bin")}}
	for major, want := range map[string]string{"15": v15, "16": v16, "14": v16, "": v16} {
		got, err := s.binDirFor(major)
		if err != nil || got != want {
			t.Errorf("binDirFor(%q) = %q, %v; want %q", major, got, err, want)
		}
	}
}

func TestNoBinaries(t *testing.T) {
	root := t.TempDir()
	fakePGConfig(t, root, filepath.Join(root, "missing")) // pg_config without a server
	if err := os.MkdirAll(filepath.Join(root, "lib", "15", "bin"), 0o755); err != nil {
		t.Fatal(err) // a version folder without programs
	}
	s := binSearch{path: root, patterns: []string{filepath.Join(root, "lib", "*", "bin")}}
	_, err := s.binDirFor("")
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries", err)
	}
	msg := ErrNoBinaries.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "apt-get install postgresql") || !strings.Contains(msg, "DATABASE_URL") {
		t.Errorf("ErrNoBinaries should be one line naming the package and DATABASE_URL: %q", msg)
	}
}

func TestBinDirOnThisMachine(t *testing.T) {
	dir, err := systemSearch().binDirFor("")
	if err != nil {
		t.Fatalf("binDirFor: %v (the other tests of this package need PostgreSQL too)", err)
	}
	if !hasServer(dir) {
		t.Errorf("binDirFor = %s, which lacks postgres or initdb", dir)
	}
}
