package pgembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries reports that the PostgreSQL server programs are not installed.
var ErrNoBinaries = errors.New("pgembed: no PostgreSQL server binaries (postgres and initdb) found; install them (Debian/Ubuntu: apt-get install postgresql) or set DATABASE_URL to use an existing server")

// versionedPatterns are the places packagers put one folder per major
// version; the single * of each pattern is the version.
var versionedPatterns = []string{
	"/usr/lib/postgresql/*/bin", // Debian, Ubuntu
	"/usr/pgsql-*/bin",          // PGDG packages for RHEL, Fedora
}

// binSearch says where to look for the server binaries. Tests point it at a
// fake tree so that the outcome does not depend on the machine.
type binSearch struct {
	path     string   // a PATH list: pg_config is looked up here, then postgres and initdb
	patterns []string // versioned folders, see versionedPatterns
}

func systemSearch() binSearch {
	return binSearch{path: os.Getenv("PATH"), patterns: versionedPatterns}
}

// binCandidate is a folder that holds postgres and initdb.
type binCandidate struct {
	dir     string
	version string // the major version when the folder's path tells it, else ""
}

// binDirFor returns the folder holding the postgres and initdb programs:
// the one `pg_config --bindir` names when it holds both, else the newest of
// /usr/lib/postgresql/<version>/bin (and /usr/pgsql-<version>/bin), else the
// first folder of PATH where initdb is found next to postgres; ErrNoBinaries
// when there is none. For a cluster whose data was made by major version
// major (or "" for a new one), that version wins: a newer installed version
// must not win over the one the data needs, which happens on Debian where an
// upgrade installs the new major next to the old one.
func (s binSearch) binDirFor(major string) (string, error) {
	cands := s.candidates()
	if len(cands) == 0 {
		return "", ErrNoBinaries
	}
	for _, c := range cands {
		if major != "" && c.version == major {
			return c.dir, nil
		}
	}
	return cands[0].dir, nil
}

// candidates lists every folder holding postgres and initdb, best first,
// each real folder once.
func (s binSearch) candidates() []binCandidate {
	var out []binCandidate
	seen := map[string]bool{}
	add := func(dir string) {
		if dir == "" || !hasServer(dir) {
			return
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil || seen[real] {
			return
		}
		seen[real] = true
		out = append(out, binCandidate{dir: filepath.Clean(dir), version: s.versionOf(real)})
	}

	if dir, ok := s.pgConfigBinDir(); ok {
		add(dir)
	}
	for _, pattern := range s.patterns {
		for _, dir := range newestFirst(pattern) {
			add(dir)
		}
	}
	for _, dir := range s.pathDirs() {
		if hasServer(dir) {
			add(dir)
			continue
		}
		// Distributions often link only the client programs, or initdb
		// alone, into /usr/bin; the server sits next to the link's target.
		if target, err := filepath.EvalSymlinks(filepath.Join(dir, "initdb")); err == nil {
			add(filepath.Dir(target))
		}
	}
	return out
}

// pathDirs returns the absolute folders of the search PATH; relative entries
// are skipped for the same reason os/exec refuses them.
func (s binSearch) pathDirs() []string {
	var dirs []string
	for _, dir := range filepath.SplitList(s.path) {
		if filepath.IsAbs(dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// pgConfigBinDir asks the pg_config found on the search PATH for its bindir.
func (s binSearch) pgConfigBinDir() (string, bool) {
	var pgConfig string
	for _, dir := range s.pathDirs() {
		if p := filepath.Join(dir, "pg_config"); isExecutable(p) {
			pgConfig = p
			break
		}
	}
	if pgConfig == "" {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
	if err != nil {
		return "", false
	}
	dir := strings.TrimSpace(string(out))
	if !filepath.IsAbs(dir) {
		return "", false
	}
	return dir, true
}

// versionOf returns the major version a versioned pattern gives dir, or "".
func (s binSearch) versionOf(dir string) string {
	for _, pattern := range s.patterns {
		if v, ok := matchVersion(pattern, dir); ok {
			return v
		}
	}
	return ""
}

// matchVersion returns the part of path that stands for the * in pattern.
func matchVersion(pattern, path string) (string, bool) {
	prefix, suffix, ok := strings.Cut(pattern, "*")
	if !ok || !strings.HasPrefix(path, prefix) || !strings.HasSuffix(path, suffix) {
		return "", false
	}
	v := path[len(prefix) : len(path)-len(suffix)]
	if v == "" || strings.ContainsRune(v, '/') {
		return "", false
	}
	return v, true
}

// newestFirst returns the folders matching a versioned pattern, the highest
// version first. Versions compare as numbers, so 16 comes before 9.6.
func newestFirst(pattern string) []string {
	dirs, _ := filepath.Glob(pattern)
	sort.SliceStable(dirs, func(i, j int) bool {
		vi, _ := matchVersion(pattern, dirs[i])
		vj, _ := matchVersion(pattern, dirs[j])
		return compareVersions(vi, vj) > 0
	})
	return dirs
}

// compareVersions orders dotted versions part by part, numerically; a part
// that does not start with a digit ranks below any number.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		na, nb := -1, -1 // a missing part ranks below a present one
		if i < len(pa) {
			na = leadingNumber(pa[i])
		}
		if i < len(pb) {
			nb = leadingNumber(pb[i])
		}
		if na != nb {
			if na > nb {
				return 1
			}
			return -1
		}
	}
	return strings.Compare(a, b)
}

// leadingNumber returns the number a version part starts with ("15beta1" →
// 15), or -1 when it starts with no digit.
func leadingNumber(part string) int {
	end := 0
	for end < len(part) && part[end] >= '0' && part[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(part[:end])
	if err != nil {
		return -1
	}
	return n
}

func hasServer(dir string) bool {
	return isExecutable(filepath.Join(dir, "postgres")) && isExecutable(filepath.Join(dir, "initdb"))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// checkBinDir validates a BinDir given in the configuration.
func checkBinDir(dir string) error {
	if !hasServer(dir) {
		return fmt.Errorf("pgembed: BinDir %s lacks postgres or initdb: %w", dir, ErrNoBinaries)
	}
	return nil
}
