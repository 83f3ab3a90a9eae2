//go:build linux

package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

// tarBase is a base given as a tar stream, as a provider elsewhere would
// get it; entries may be hostile.
type tarBase []byte

func (b tarBase) WriteTar(_ context.Context, w io.Writer) error {
	_, err := w.Write(b)
	return err
}

// ID shares the base with none: each workspace unpacks its own.
func (tarBase) ID() string { return "" }

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...tarEntry) tarBase {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ, mode := e.typ, e.mode
		if typ == 0 {
			typ = tar.TypeReg
		}
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// newLocal is a Local provider whose sessions' folders lie in a folder of
// the test's, ended with the test.
func newLocal(t *testing.T) (*sandbox.Local, string) {
	t.Helper()
	return newLocalOn(t, newSandbox(t, nil))
}

// newLocalOn is newLocal on the sandbox sb.
func newLocalOn(t *testing.T, sb *sandbox.Sandbox) (*sandbox.Local, string) {
	t.Helper()
	area := filepath.Join(openDir(t), "sessions")
	l := sandbox.NewLocal(sandbox.LocalConfig{Box: sb, Area: area, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return l, area
}

func localSession(id string) sandbox.Session {
	return sandbox.Session{ID: id, ProjectID: 1, UID: nextUID(), Network: sandbox.Deny}
}

func runIn(t *testing.T, l *sandbox.Local, s sandbox.Session, script string) *sandbox.Result {
	t.Helper()
	res, err := l.Run(context.Background(), s, sandbox.Command{Argv: bash(script), Limits: sandbox.Limits{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return res
}

// A base's entries that name places outside the workspace are not
// followed: not through "..", an absolute name, or a link the archive
// made first.
func TestLocalUnpacksAHostileBaseInsideTheWorkspace(t *testing.T) {
	l, _ := newLocal(t)
	outside := t.TempDir()
	base := tarOf(t,
		tarEntry{name: "ok.txt", body: "fine\n"},
		tarEntry{name: "run.sh", body: "#!/bin/sh\n", mode: 0o755},
		tarEntry{name: "../escaped.txt", body: "x"},
		tarEntry{name: filepath.Join(outside, "absolute.txt"), body: "x"},
		tarEntry{name: "out", typ: tar.TypeSymlink, link: outside},
		tarEntry{name: "out/through-link.txt", body: "x"},
	)
	s := localSession("edit_unpack")
	prepared, err := l.Prepare(context.Background(), s, base)
	if err != nil && !strings.Contains(err.Error(), "through-link") {
		t.Fatal(err)
	}
	if err == nil && !prepared.Fresh {
		t.Fatal("a first Prepare did not build")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("the base wrote outside the workspace: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "escaped.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("../ was followed: %v", err)
	}
}

// A workspace is built once from its base; commands see it with the
// files written into it, and a file the session's user replaced with a
// link is replaced, never followed, by the next write.
func TestLocalWorkspaceWritesNeverFollowTheSessionsLinks(t *testing.T) {
	l, _ := newLocal(t)
	ctx := context.Background()
	s := localSession("edit_writes")
	base := tarOf(t, tarEntry{name: "a.txt", body: "base\n"}, tarEntry{name: "run.sh", body: "echo ran\n", mode: 0o755})
	if p, err := l.Prepare(ctx, s, base); err != nil || !p.Fresh {
		t.Fatalf("first Prepare = %+v, %v", p, err)
	}
	if p, err := l.Prepare(ctx, s, base); err != nil || p.Fresh {
		t.Fatalf("second Prepare = %+v, %v: it built again", p, err)
	}
	if err := l.Write(ctx, s, sandbox.File{Path: "dir/new.txt", Content: []byte("new\n"), Exists: true}); err != nil {
		t.Fatal(err)
	}
	res := runIn(t, l, s, "cat a.txt dir/new.txt && ./run.sh && stat -c %U dir/new.txt")
	if got := string(res.Stdout); res.ExitCode != 0 || !strings.HasPrefix(got, "base\nnew\nran\n") {
		t.Fatalf("the command saw %q (exit %d, %s)", got, res.ExitCode, res.Stderr)
	}

	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("root's\n"), 0o600)
	runIn(t, l, s, "rm a.txt && ln -s "+victim+" a.txt && rm -r dir && ln -s "+filepath.Dir(victim)+" dir")
	if err := l.Write(ctx, s, sandbox.File{Path: "a.txt", Content: []byte("edited\n"), Exists: true}); err != nil {
		t.Fatal(err)
	}
	err := l.Write(ctx, s, sandbox.File{Path: "dir/victim", Content: []byte("owned\n"), Exists: true})
	if b, _ := os.ReadFile(victim); string(b) != "root's\n" {
		t.Fatalf("a write followed the session's link: the host's file holds %q (write: %v)", b, err)
	}
	if res := runIn(t, l, s, "cat a.txt"); string(res.Stdout) != "edited\n" {
		t.Fatalf("a.txt is %q", res.Stdout)
	}

	other := s
	other.UID = nextUID()
	if _, err := l.Run(ctx, other, sandbox.Command{Argv: bash("true")}); !errors.Is(err, sandbox.ErrBadSpec) {
		t.Fatalf("another uid ran in the session's workspace: %v", err)
	}
	if _, err := l.Prepare(ctx, sandbox.Session{ID: "../up", UID: nextUID()}, base); !errors.Is(err, sandbox.ErrBadSpec) {
		t.Fatalf("a session named ../up was prepared: %v", err)
	}
}

// Changed meets what commands wrote and the deletions of the base's
// files, and not the base's untouched files.
func TestLocalChangedMeetsWhatCommandsChanged(t *testing.T) {
	l, _ := newLocal(t)
	ctx := context.Background()
	s := localSession("edit_changed")
	base := tarOf(t, tarEntry{name: "keep.txt", body: "k\n"}, tarEntry{name: "gone.txt", body: "g\n"}, tarEntry{name: "big.txt", body: "b\n"})
	prepared, err := l.Prepare(ctx, s, base)
	if err != nil {
		t.Fatal(err)
	}
	runIn(t, l, s, "rm gone.txt && echo made > made.txt && head -c 5000 /dev/zero > big.txt && mkfifo pipe")
	seen := map[string]sandbox.Entry{}
	var read = map[string]string{}
	err = l.Changed(ctx, s, 8, func(e sandbox.Entry) error {
		seen[e.Path] = e
		if e.Kind == sandbox.KindFile || e.Kind == sandbox.KindOther {
			buf := make([]byte, 100)
			n, st, err := e.Look.ReadFile(buf)
			if err != nil {
				return err
			}
			if st.Regular && st.Size < 100 {
				read[e.Path] = string(buf[:n])
			} else if n != 0 {
				t.Errorf("%s: read %d bytes of a file it should not read (%+v)", e.Path, n, st)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := seen["keep.txt"]; ok && prepared.Layered {
		t.Error("an untouched file of the base was met")
	}
	if e, ok := seen["gone.txt"]; prepared.Layered && (!ok || e.Kind != sandbox.KindWhiteout) {
		t.Errorf("the deleted file was met as %+v", e)
	}
	if read["made.txt"] != "made\n" {
		t.Errorf("made.txt read as %q", read["made.txt"])
	}
	if _, ok := read["big.txt"]; ok {
		t.Error("a file larger than the buffer was read")
	}
	if _, ok := read["pipe"]; ok {
		t.Error("a pipe was read")
	}
}

// A console is a shell on a terminal: it echoes what is typed, and Kill
// ends it with everything it started, which Wait reports.
func TestLocalConsoleRunsAndKills(t *testing.T) {
	l, _ := newLocal(t)
	ctx := context.Background()
	s := localSession("edit_console")
	if _, err := l.Prepare(ctx, s, tarOf(t, tarEntry{name: "a.txt", body: "a\n"})); err != nil {
		t.Fatal(err)
	}
	c, err := l.Start(ctx, s, 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exited := make(chan sandbox.ShellExit, 1)
	go func() {
		exit, _ := c.Wait()
		exited <- exit
	}()
	if _, err := c.Write([]byte("sleep 1000 & echo hi-$((40+2))\n")); err != nil {
		t.Fatal(err)
	}
	var out []byte
	buf := make([]byte, 4096)
	if !wait.Until(wait.Long, func() bool {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, _ := c.Read(buf)
		out = append(out, buf[:n]...)
		return bytes.Contains(out, []byte("hi-42"))
	}) {
		t.Fatalf("the console showed %q", out)
	}
	if err := c.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-exited:
		if exit.Signal != "SIGKILL" {
			t.Errorf("the shell ended with %+v, not SIGKILL", exit)
		}
	case <-time.After(wait.Short.Duration()):
		t.Fatal("Wait did not return after Kill")
	}
	if pids := procsOf(s.UID); len(pids) != 0 {
		t.Fatalf("processes of the console outlived Kill: %v", pids)
	}
}

// Release takes the checkout down and the next Prepare builds it again;
// End leaves nothing of the session.
func TestLocalReleaseAndEnd(t *testing.T) {
	l, area := newLocal(t)
	ctx := context.Background()
	s := localSession("edit_life")
	base := tarOf(t, tarEntry{name: "a.txt", body: "a\n"})
	if _, err := l.Prepare(ctx, s, base); err != nil {
		t.Fatal(err)
	}
	runIn(t, l, s, "echo kept > ~/note && echo lost > made.txt")
	if err := l.Release(ctx, s); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Prepare(ctx, s, base); err != nil || !p.Fresh {
		t.Fatalf("Prepare after Release = %+v, %v", p, err)
	}
	if res := runIn(t, l, s, "cat ~/note; ls"); string(res.Stdout) != "kept\na.txt\n" {
		t.Fatalf("after Release the session sees %q", res.Stdout)
	}
	if err := l.End(ctx, s); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(area); len(entries) != 0 {
		t.Fatalf("End left %s", entries[0].Name())
	}
	if _, err := l.Run(ctx, s, sandbox.Command{Argv: bash("true")}); !errors.Is(err, sandbox.ErrBadSpec) {
		t.Fatalf("a command ran in an ended session: %v", err)
	}
}

// TestLocalAnticipateStartsTheNextCommandsHelper: Anticipate starts one
// helper for a prepared workspace (none for a workspace not prepared, and
// no second while one waits), and the next command runs in it; that
// command starts the helpers of the commands after it.
func TestLocalAnticipateStartsTheNextCommandsHelper(t *testing.T) {
	sb := newSandbox(t, nil)
	if sb.CgroupMode() == "" {
		t.Skip("precondition: writable cgroups, whose names tell this session's spares from other tests'")
	}
	l, _ := newLocalOn(t, sb)
	ctx := context.Background()
	s := localSession("edit_anticipate")
	// Other tests' spares may still wait; this session's join its uid's
	// groups, which their arguments name.
	spareHelpers := func(t *testing.T) []string {
		var ours []string
		for _, pid := range spareHelpers(t) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
			if strings.Contains(string(cmdline), "/u"+strconv.FormatUint(uint64(s.UID), 10)+"/") {
				ours = append(ours, pid)
			}
		}
		return ours
	}
	l.Anticipate(s)
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("helpers for a workspace not prepared: %v", got)
	}
	if _, err := l.Prepare(ctx, s, tarOf(t, tarEntry{name: "a.txt", body: "a\n"})); err != nil {
		t.Fatal(err)
	}
	l.Anticipate(s)
	l.Anticipate(s)
	var waiting []string
	if !wait.Until(wait.Long, func() bool { waiting = spareHelpers(t); return len(waiting) == 1 }) {
		t.Fatalf("helpers after Anticipate: %v, want one", waiting)
	}
	if res := runIn(t, l, s, "cat a.txt"); string(res.Stdout) != "a\n" {
		t.Fatalf("the command saw %q", res.Stdout)
	}
	// It ran the command and exited with it.
	if _, err := os.Stat(filepath.Join("/proc", waiting[0])); !os.IsNotExist(err) {
		t.Fatalf("the anticipated helper %s still runs after the command: %v", waiting[0], err)
	}
	if !wait.Until(wait.Long, func() bool { return len(spareHelpers(t)) == 3 }) {
		t.Fatalf("helpers for the commands after it: %v, want 3", spareHelpers(t))
	}
}
