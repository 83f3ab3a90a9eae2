package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/testrig/wait"
)

func TestDashValuesAreRefusedBeforeGitRuns(t *testing.T) {
	git, count := countingGit(t)
	s := newService(t, withGit(git))
	ctx := testContext(t)
	r, first := mustCreate(t, s, "p")

	tests := []struct {
		name string
		call func() error
	}{
		{"ResolveCommit", func() error { _, err := s.ResolveCommit(ctx, r, "--output=/tmp/x"); return err }},
		{"ListAll", func() error { _, _, err := s.ListAll(ctx, r, "-h"); return err }},
		{"List", func() error { _, err := s.List(ctx, r, "--all", ""); return err }},
		{"ReadBlob", func() error { _, _, err := s.ReadBlob(ctx, r, "-p", "a"); return err }},
		{"FetchInto", func() error { _, err := s.FetchInto(ctx, r, "--upload-pack=touch /tmp/x", true); return err }},
		{"CommitWithParents tree", func() error { _, err := s.CommitWithParents(ctx, r, "-x", nil, "m"); return err }},
		{"CommitWithParents parent", func() error { _, err := s.CommitWithParents(ctx, r, emptyTree, []string{"--all"}, "m"); return err }},
		{"CommitTree parent", func() error { _, err := s.CommitTree(ctx, r, t.TempDir(), []string{"-h"}, "m"); return err }},
		{"ResolveCommit NUL", func() error { _, err := s.ResolveCommit(ctx, r, "main\x00x"); return err }},
		{"ResolveCommit empty", func() error { _, err := s.ResolveCommit(ctx, r, ""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := count()
			err := tt.call()
			if !errors.Is(err, ErrBadArgument) {
				t.Fatalf("err = %v, want ErrBadArgument", err)
			}
			if n := count() - before; n != 0 {
				t.Fatalf("%d git processes started for a refused value", n)
			}
		})
	}
	// The same service still works: the refusals were not git failures.
	if _, err := s.ResolveCommit(ctx, r, first); err != nil {
		t.Fatal(err)
	}
}

func TestCommandBuilderKeepsValuesOutOfOptions(t *testing.T) {
	c := newCommand("fetch", "--end-of-options").url("https://u:secret@host/r.git").lit("+HEAD:x")
	if c.err != nil {
		t.Fatal(c.err)
	}
	if got := strings.Join(c.shown, " "); got != "fetch --end-of-options https://host/r.git +HEAD:x" {
		t.Errorf("shown = %q", got)
	}
	if got := c.scrub("fatal: could not read https://u:secret@host/r.git"); strings.Contains(got, "secret") {
		t.Errorf("scrub left the secret: %q", got)
	}
	if c := newCommand("log").val("ok").val("-p"); !errors.Is(c.err, ErrBadArgument) {
		t.Errorf("err = %v, want ErrBadArgument", c.err)
	}
}

func TestEnvironmentIsFixed(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "env")
	git := script(t, fmt.Sprintf("env > %q\nexec %q \"$@\"", dump, realGit))
	leak := filepath.Join(t.TempDir(), "leaked-git-dir")
	t.Setenv("GIT_DIR", leak)
	t.Setenv("GIT_WORK_TREE", leak)
	t.Setenv("ATELIER_SECRET", "s3cret")
	t.Setenv("GIT_CONFIG_PARAMETERS", "'user.name'='Leaked'")
	t.Setenv("GIT_AUTHOR_NAME", "Leaked")
	s := newService(t, withGit(git))

	r, first := mustCreate(t, s, "p")
	if _, err := os.Stat(leak); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("GIT_DIR from the server's environment reached git: %v", err)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	allowed := map[string]bool{
		"PATH": true, "LC_ALL": true, "HOME": true, "GIT_CONFIG_GLOBAL": true,
		"GIT_CONFIG_NOSYSTEM": true, "GIT_ATTR_NOSYSTEM": true, "GIT_TERMINAL_PROMPT": true,
		"GIT_SSH_COMMAND": true, "GIT_ALLOW_PROTOCOL": true, "GIT_CEILING_DIRECTORIES": true,
		"PWD": true, "OLDPWD": true, "SHLVL": true, "_": true, // added by the wrapper's shell
	}
	for k := range env {
		if !allowed[k] {
			t.Errorf("git saw %s=%q", k, env[k])
		}
	}
	want := map[string]string{
		"LC_ALL":              "C",
		"GIT_TERMINAL_PROMPT": "0",
		"GIT_CONFIG_NOSYSTEM": "1",
		"HOME":                s.home,
		"GIT_CONFIG_GLOBAL":   filepath.Join(s.home, ".gitconfig"),
		"PATH":                os.Getenv("PATH"),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if !strings.HasPrefix(env["HOME"], s.root+string(filepath.Separator)) {
		t.Errorf("HOME %q is not under the root %q", env["HOME"], s.root)
	}
	// The private .gitconfig made the commit; the server's identity did not.
	who := tgit(t, r.GitDir, "log", "-1", "--format=%an <%ae>|%cn <%ce>", first)
	if who != "Atelier <atelier@localhost>|Atelier <atelier@localhost>" {
		t.Errorf("first commit by %q", who)
	}
}

// procGone reports whether pid has exited (a zombie counts: nothing reaps
// orphans in some containers).
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

func TestTimeoutKillsAHangingGit(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration // Config.Timeout
		ctx     func(context.Context) (context.Context, context.CancelFunc)
		want    error
	}{
		{"config timeout", 300 * time.Millisecond, func(ctx context.Context) (context.Context, context.CancelFunc) {
			return ctx, func() {}
		}, context.DeadlineExceeded},
		{"caller cancels", time.Hour, func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			// The wrapper's child keeps the pipes open: killing the
			// wrapper alone would leave Wait hanging on them.
			git := script(t, fmt.Sprintf("sleep 60 &\necho $! > %q\nwait", pidFile))
			s := newService(t, withGit(git), func(c *Config) { c.Timeout = tt.timeout })
			ctx, cancel := tt.ctx(testContext(t))
			defer cancel()

			start := time.Now()
			_, err := s.OpenLocal(ctx, realDir(t))
			took := time.Since(start)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if errors.Is(err, ErrNotRepository) {
				t.Fatal("a killed git is not ErrNotRepository")
			}
			var ge *GitError
			if !errors.As(err, &ge) || ge.ExitCode != -1 {
				t.Fatalf("err = %#v, want a *GitError with ExitCode -1", err)
			}
			if took > 2*time.Second {
				t.Fatalf("returned after %s", took)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			wait.For(t, wait.Short, "the wrapper's child to die", func() bool { return procGone(pid) })
		})
	}
}

func TestStderrIsCapturedAndBounded(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")

	_, err := s.List(ctx, r, first, "missing")
	var ge *GitError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ge) {
		t.Fatalf("err = %v, want ErrNotFound wrapping a *GitError", err)
	}
	if ge.ExitCode != 128 || !strings.Contains(ge.Stderr, "Not a valid object name") {
		t.Errorf("exit %d, stderr %q", ge.ExitCode, ge.Stderr)
	}

	noisy := script(t, `head -c 1000000 /dev/zero | tr '\0' x >&2; echo >&2; echo "fatal: the end" >&2; exit 3`)
	s = newService(t, withGit(noisy))
	_, err = s.OpenLocal(ctx, realDir(t))
	if !errors.As(err, &ge) {
		t.Fatalf("err = %v, want a *GitError", err)
	}
	if ge.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", ge.ExitCode)
	}
	if len(ge.Stderr) > stderrLimit+16 || !strings.HasSuffix(ge.Stderr, "fatal: the end\n") {
		t.Errorf("stderr of %d bytes ending %q", len(ge.Stderr), ge.Stderr[max(0, len(ge.Stderr)-40):])
	}
	if !strings.Contains(err.Error(), "fatal: the end") {
		t.Errorf("error %q does not say what git said", err)
	}
}

func TestOutputIsBounded(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, func(c *Config) { c.MaxOutput = 1000 })
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big"), strings.Repeat("x", 5000))
	writeFile(t, filepath.Join(dir, "small"), "x")
	c, err := s.CommitTree(ctx, r, dir, []string{first}, "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadBlob(ctx, r, c, "small"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.ReadBlob(ctx, r, c, "big")
	if err == nil || !strings.Contains(err.Error(), "output over 1000 bytes") {
		t.Fatalf("err = %v, want output over the limit", err)
	}
}
