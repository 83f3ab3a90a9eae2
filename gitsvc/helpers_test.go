package gitsvc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// realGit is the git binary the tests run, directly and behind wrappers.
var realGit string

func TestMain(m *testing.M) {
	p, err := exec.LookPath("git")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gitsvc tests need git:", err)
		os.Exit(1)
	}
	realGit = p
	goleak.VerifyTestMain(m)
}

const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

func newService(t *testing.T, edit ...func(*Config)) *Service {
	t.Helper()
	cfg := Config{
		Root:     filepath.Join(t.TempDir(), "git"),
		Timeout:  30 * time.Second,
		LockWait: 10 * time.Second,
	}
	for _, e := range edit {
		e(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func withGit(path string) func(*Config) { return func(c *Config) { c.GitPath = path } }

func withLockWait(d time.Duration) func(*Config) { return func(c *Config) { c.LockWait = d } }

// tgit runs the real git for fixtures, isolated from the machine's config,
// and returns its stdout without the trailing newline.
func tgit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(realGit, args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1",
		"LC_ALL=C",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com",
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSuffix(string(out), "\n")
}

// realDir is a new temporary folder by its real path (TMPDIR may be a
// symlink; git reports real paths).
func realDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newRepo makes a repository with branch main and one commit.
func newRepo(t *testing.T) string {
	t.Helper()
	dir := realDir(t)
	tgit(t, dir, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, "README"), "hello\n")
	tgit(t, dir, "add", "README")
	tgit(t, dir, "commit", "-q", "-m", "first")
	return dir
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "git")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// countingGit is a git that notes each run in a file before running the
// real one; count says how many processes were started so far.
func countingGit(t *testing.T) (path string, count func() int) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "runs")
	path = script(t, fmt.Sprintf("echo run >> %q\nexec %q \"$@\"", log, realGit))
	return path, func() int {
		b, err := os.ReadFile(log)
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte("\n"))
	}
}

// holdFlock makes another process hold flock on name (mode "-x" or "-s"),
// as a person's tool would, until stop is called or the test ends.
func holdFlock(t *testing.T, name, mode string, hold time.Duration) (stop func()) {
	t.Helper()
	cmd := exec.Command("flock", mode, name, "sh", "-c",
		fmt.Sprintf("echo locked; exec sleep %.3f", hold.Seconds()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
	}
	locked := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		locked <- line
		cmd.Wait()
		close(waited)
	}()
	t.Cleanup(stop)
	select {
	case line := <-locked:
		if line != "locked\n" {
			t.Fatalf("flock holder said %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flock holder did not take the lock")
	}
	return stop
}

// flockFree asks flock(1) whether the lock could be taken now in mode.
func flockFree(t *testing.T, name, mode string) bool {
	t.Helper()
	err := exec.Command("flock", "-n", mode, name, "true").Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return false
	}
	t.Fatalf("flock -n %s: %v", mode, err)
	return false
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, s *Service, name string) (*Repo, string) {
	t.Helper()
	r, first, err := s.CreateCanonical(testContext(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return r, first
}
