//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

// copyOfThisBinary writes this test binary to a file of root's, mode 0755,
// and returns its path.
func copyOfThisBinary(t *testing.T) string {
	t.Helper()
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(t.TempDir(), "helper")
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNamedHelperRunsCommands: a sandbox whose helper is another file runs
// its commands through that file, opened once: replacing the file
// afterwards changes nothing.
func TestNamedHelperRunsCommands(t *testing.T) {
	needRoot(t)
	helper := copyOfThisBinary(t)
	sb := newSandbox(t, func(c *sandbox.Config) { c.Helper = helper })
	if err := os.WriteFile(helper+".new", []byte("#!/bin/sh\necho swapped\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(helper+".new", helper); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, sb)
	if out := s.mustRun(t, "echo from the jail; id -u"); out != "from the jail\n"+strconv.FormatUint(uint64(s.uid), 10)+"\n" {
		t.Fatalf("output %q", out)
	}
	// While a command runs, its helper is the named file's first version,
	// now replaced: the kernel says "(deleted)".
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.Run(ctx, s.spec("sleep 30"), sandbox.Limits{Timeout: time.Minute})
	}()
	defer func() { cancel(); <-done }()
	if !wait.Until(wait.Long, func() bool { return len(processesRunning(helper+" (deleted)")) > 0 }) {
		t.Fatalf("no process runs %s", helper)
	}
}

// processesRunning lists the processes whose executable is exe.
func processesRunning(exe string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if target, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && target == exe {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestHelperOnlyRootMayChange: a helper someone else could change, or a
// link to one, is refused: whoever could write it would run as root.
func TestHelperOnlyRootMayChange(t *testing.T) {
	needRoot(t)
	good := copyOfThisBinary(t)
	groupWritable := copyOfThisBinary(t)
	if err := os.Chmod(groupWritable, 0o775); err != nil {
		t.Fatal(err)
	}
	notRoots := copyOfThisBinary(t)
	if err := os.Chown(notRoots, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"group-writable": groupWritable, "not root's": notRoots, "a link": link,
		"a folder": t.TempDir(), "relative": "helper", "missing": good + ".gone",
	} {
		_, err := sandbox.New(sandbox.Config{UIDBase: uidBase, UIDCount: uidCount, Helper: path})
		if !errors.Is(err, sandbox.ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
}
