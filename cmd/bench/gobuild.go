package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// A session's `go build` used to start cold every time: HOME was new, and
// Go's caches with it. The project's cache keeps them between sessions;
// this row builds a real module in a second session of a project and holds
// it against a warm build of the same module on the host, with the first
// session's build, cold, beside it.

// sandboxGo is the Go the sandbox has on its PATH, used on the host too so
// both sides build with one toolchain.
const sandboxGo = "/usr/local/go/bin/go"

// goModule is the module the row builds, on the host and packed for an
// import.
type goModule struct {
	dir     string // on the host
	archive []byte // its .tar.gz
	about   string
}

// makeGoModule copies the packages fault, limits and workspace into dir
// as the module atelier (so their imports stand as they are), with
// golang.org/x/sys, which workspace needs, vendored by `go mod vendor`
// from this machine's module cache. A short run builds two packages that
// import nothing instead: a cold build of anything that imports fmt
// compiles Go's runtime and takes a minute of a busy 2-core machine, near
// a command's timeout.
func makeGoModule(dir string, short bool) (*goModule, error) {
	if short {
		return packModule(dir, "two packages that import nothing", map[string]string{
			"go.mod":     "module example.com/short\n\ngo 1.22\n",
			"one/one.go": "package one\n\n// One answers one.\nfunc One() int { return 1 }\n",
			"two/two.go": "package two\n\nimport \"example.com/short/one\"\n\n// Two answers two.\nfunc Two() int { return one.One() + 1 }\n",
		})
	}
	goList := func(args ...string) (string, error) {
		out, err := exec.Command(sandboxGo, append([]string{"list", "-m", "-f"}, args...)...).Output()
		if err != nil {
			return "", fmt.Errorf("bench: go list -m: %w", err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	root, err := goList("{{.Dir}}")
	if err != nil {
		return nil, err
	}
	goVersion, err := goList("{{.GoVersion}}")
	if err != nil {
		return nil, err
	}
	sys, err := goList("{{.Version}}", "golang.org/x/sys")
	if err != nil {
		return nil, err
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return nil, err
	}
	files := map[string]string{"go.mod": "module atelier\n\ngo " + goVersion + "\n\nrequire golang.org/x/sys " + sys + "\n"}
	var gosum strings.Builder
	for line := range strings.Lines(string(sums)) {
		if strings.HasPrefix(line, "golang.org/x/sys "+sys) {
			gosum.WriteString(line)
		}
	}
	files["go.sum"] = gosum.String()
	pkgs := []string{"fault", "limits", "workspace"}
	for _, p := range pkgs {
		sources, _ := filepath.Glob(filepath.Join(root, p, "*.go"))
		for _, f := range sources {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			files[p+"/"+filepath.Base(f)] = string(b)
		}
	}
	return packModule(dir, "a copy of this repository's "+strings.Join(pkgs, ", ")+", golang.org/x/sys vendored", files)
}

// packModule writes files into dir, vendors what its go.mod requires, and
// packs the result.
func packModule(dir, about string, files map[string]string) (*goModule, error) {
	for name, content := range files {
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(name)), content); err != nil {
			return nil, err
		}
	}
	if strings.Contains(files["go.mod"], "require") {
		vendor := exec.Command(sandboxGo, "mod", "vendor")
		vendor.Dir = dir
		vendor.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
		if out, err := vendor.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("bench: go mod vendor: %w: %s", err, out)
		}
	}
	m := &goModule{dir: dir}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	goFiles := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".go") {
			goFiles++
		}
		rel, _ := filepath.Rel(dir, p)
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = errors.Join(tw.Close(), gz.Close())
	}
	if err != nil {
		return nil, err
	}
	m.archive = buf.Bytes()
	m.about = fmt.Sprintf("%s (%d .go files)", about, goFiles)
	return m, nil
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// goRound is one round's figures, in seconds.
type goRound struct {
	cold, warm, host float64
	warmStages       stages // where the second session's build went in the server
}

// goBuild imports the module into a project of its own each round (so its
// cache starts empty), builds it in one session and then in a second one,
// and builds it twice on the host with a cache of the round's own, timing
// the second.
func (b *bench) goBuild() ([]row, error) {
	if _, err := os.Stat(sandboxGo); err != nil {
		return nil, fmt.Errorf("bench: the Go row needs Go at %s, on the sandbox's PATH: %w", sandboxGo, err)
	}
	mod, err := makeGoModule(filepath.Join(b.tmp, "gomod"), b.sz.goSmall)
	if err != nil {
		return nil, err
	}
	var rounds []goRound
	for i := range b.sz.rounds {
		var r goRound
		id, err := b.c.CreateProject(fmt.Sprintf("bench-go-%d", i+1))
		if err != nil {
			return nil, err
		}
		if err := b.c.Import(id, "module.tar.gz", mod.archive); err != nil {
			return nil, err
		}
		b.logf("round %d of %d: go build in a first session, then in a second, of %s", i+1, b.sz.rounds, mod.about)
		if r.cold, _, err = b.sessionGoBuild(id); err != nil {
			return nil, err
		}
		if r.warm, r.warmStages, err = b.sessionGoBuild(id); err != nil {
			return nil, err
		}
		b.logf("round %d of %d: go build on the host, twice", i+1, b.sz.rounds)
		if r.host, err = hostGoBuild(mod.dir, filepath.Join(b.tmp, fmt.Sprintf("gocache-%d", i+1))); err != nil {
			return nil, err
		}
		rounds = append(rounds, r)
	}
	return []row{goBuildRow(rounds, mod)}, nil
}

// sessionGoBuild opens a session of the project, builds its checkout with
// a first command, times `go build ./...` as the person's page sends it
// and where its time went in the server, and ends the session.
func (b *bench) sessionGoBuild(id int64) (took float64, st stages, err error) {
	base, err := openSession(b.c, id)
	if err != nil {
		return 0, st, err
	}
	if _, err := oneShot(b.c, base); err != nil {
		return 0, st, err
	}
	var res struct {
		ExitCode int    `json:"exitCode"`
		Stderr   string `json:"stderr"`
	}
	st, err = b.staged(func() error {
		start := time.Now()
		if err := b.c.PostJSON(base+"/commands", url.Values{"command": {"go build ./..."}}, &res); err != nil {
			return fmt.Errorf("bench: go build: %w", err)
		}
		took = time.Since(start).Seconds()
		return nil
	})
	if err != nil {
		return 0, st, err
	}
	if res.ExitCode != 0 {
		return 0, st, fmt.Errorf("bench: go build in a session exited %d: %s", res.ExitCode, res.Stderr)
	}
	if err := b.c.Post(base+"/discard", nil); err != nil {
		return 0, st, fmt.Errorf("bench: end session: %w", err)
	}
	return took, st, nil
}

// hostGoBuild builds dir on the host with a fresh cache, then times the
// same build again, warm.
func hostGoBuild(dir, cache string) (float64, error) {
	var took time.Duration
	for range 2 {
		build := exec.Command(sandboxGo, "build", "./...")
		build.Dir = dir
		build.Env = append(os.Environ(), "GOCACHE="+cache, "GOFLAGS=", "GOTOOLCHAIN=local")
		start := time.Now()
		if out, err := build.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("bench: go build on the host: %w: %s", err, out)
		}
		took = time.Since(start)
	}
	return took.Seconds(), nil
}

func goBuildRow(rounds []goRound, mod *goModule) row {
	col := func(pick func(goRound) float64) figure {
		f := make(figure, len(rounds))
		for i, r := range rounds {
			f[i] = pick(r)
		}
		return f
	}
	cold, warm, host := col(func(r goRound) float64 { return r.cold }), col(func(r goRound) float64 { return r.warm }),
		col(func(r goRound) float64 { return r.host })
	note := fmt.Sprintf("%.0f × faster than the first session's; ", cold.median()/warm.median()) +
		stagesNote(rounds, func(r goRound) stages { return r.warmStages }, "the build")
	return row{measure: "second session's `go build ./...` of " + mod.about + " (first command's checkout aside)",
		atelier: msFig(warm),
		anchor:  "warm `go build ./...` on the host " + msFig(host) + "; the first session's, cold as every session's was before, " + msFig(cold),
		target:  "≤ 1.5 × the host's warm build",
		result:  judge(note, atMost("", warm.median(), 1.5*host.median(), "1.5 × host's warm"))}
}
