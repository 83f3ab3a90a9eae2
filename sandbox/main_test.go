//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atelier/sandbox"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}

// Sessions' uids come from a block picked at random per test binary, so
// two runs on one machine do not kill each other's processes.
var (
	uidBase = uint32(sandbox.DefaultUIDBase + rand.N(900_000)*1000)
	uidNext atomic.Uint32
)

const uidCount = 1000

func nextUID() uint32 { return uidBase + uidNext.Add(1) }

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, since sandboxed commands switch to session uids, unshare a network namespace and use cgroups")
	}
}

// newSandbox returns a Sandbox over this binary's uid block, closed with
// the test; change adjusts its Config.
func newSandbox(t testing.TB, change func(*sandbox.Config)) *sandbox.Sandbox {
	t.Helper()
	needRoot(t)
	cfg := sandbox.Config{UIDBase: uidBase, UIDCount: uidCount, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	if change != nil {
		change(&cfg)
	}
	sb, err := sandbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// session is one session's identity and folders.
type session struct {
	sb             *sandbox.Sandbox
	uid            uint32
	dir, home, tmp string
}

// newSession makes a session with a fresh uid, its checkout and home; its
// processes are killed when the test ends.
func newSession(t testing.TB, sb *sandbox.Sandbox) *session {
	t.Helper()
	root := openDir(t)
	s := &session{sb: sb, uid: nextUID(), dir: filepath.Join(root, "checkout"), home: filepath.Join(root, "home"),
		tmp: filepath.Join(root, "tmp")}
	for _, d := range []string{s.dir, s.home, s.tmp} {
		if err := sandbox.PrepareDir(d, s.uid, s.uid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := sb.KillAll(context.Background(), s.uid); err != nil {
			t.Error(err)
		}
	})
	return s
}

// openDir is a temporary folder that other users could pass through if
// they saw it, so that what keeps them out is the jail.
func openDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (s *session) spec(script string) sandbox.Spec {
	return sandbox.Spec{UID: s.uid, GID: s.uid, Workspace: s.dir, Dir: s.dir, Home: s.home, Tmp: s.tmp, Argv: bash(script)}
}

func bash(script string) []string {
	return []string{"/bin/bash", "--noprofile", "--norc", "-c", script}
}

// run runs script in the session within 30 s.
func (s *session) run(t testing.TB, script string) (*sandbox.Result, error) {
	t.Helper()
	return s.sb.Run(context.Background(), s.spec(script), sandbox.Limits{Timeout: 30 * time.Second})
}

// mustRun runs script and fails the test unless it exits 0.
func (s *session) mustRun(t testing.TB, script string) string {
	t.Helper()
	res, err := s.run(t, script)
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d %s\nstdout: %s\nstderr: %s", script, res.ExitCode, res.Signal, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// mustFail runs script and fails the test unless it exits non-zero.
func (s *session) mustFail(t testing.TB, script string) string {
	t.Helper()
	res, err := s.run(t, script)
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	if res.ExitCode == 0 {
		t.Fatalf("%q succeeded; it must not\nstdout: %s", script, res.Stdout)
	}
	return string(res.Stderr)
}

// procsOf lists the live processes having uid as a real, effective, saved
// or file system uid, read from /proc independently of the package.
func procsOf(uid uint32) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	want := strconv.FormatUint(uint64(uid), 10)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var name, state string
		mine := false
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch f := strings.Fields(v); k {
			case "Name":
				name = strings.TrimSpace(v)
			case "State":
				state = f[0]
			case "Uid":
				for _, id := range f {
					mine = mine || id == want
				}
			}
		}
		if mine && state != "Z" && state != "X" {
			out = append(out, fmt.Sprintf("%s(%s %s)", e.Name(), name, state))
		}
	}
	return out
}

func lines(b []byte) []string {
	return strings.Split(strings.TrimRight(string(bytes.TrimSpace(b)), "\n"), "\n")
}
