package kube

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
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"atelier/sandbox"
	"atelier/testrig/kubeexec"
	"atelier/testrig/wait"
)

// tarBase is a base of a few files.
type tarBase map[string]string

func (b tarBase) ID() string { return "" }

func (b tarBase) WriteTar(_ context.Context, w io.Writer) error {
	tw := tar.NewWriter(w)
	for name, content := range b {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, content); err != nil {
			return err
		}
	}
	return tw.Close()
}

// newRigProvider is a Provider whose API server is the dynamic fake (a
// pod runs as soon as it is created, as a kubelet would make it) and
// whose exec reaches a folder of this host through the kubelet's own
// streaming server, where this binary is the pod's helper.
func newRigProvider(t *testing.T, open OpenSessions) (*Provider, *fakeAPI, string) {
	t.Helper()
	root := t.TempDir()
	cfg := testConfig()
	cfg.Helper, cfg.Workspace = os.Args[0], root
	api := newFakeAPI(t)
	t.Cleanup(api.checkVerbs)
	api.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		return false, nil, unstructured.SetNestedField(u.Object, "Running", "status", "phase")
	})
	rc := kubeexec.Serve(t, &kubeexec.Processes{Dir: func(string) (string, error) { return root, nil }})
	p := newProvider(cfg, api, NewExec(rc, cfg.Namespace, commandsContainer), open, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { p.Close(context.Background()) })
	return p, api, root
}

// A session's life through the provider, every step through real exec:
// the base unpacked, edits written, commands run under the helper's
// bounds, what the command changed found against the manifest, a shell
// on a terminal, and the pod gone at the end.
func TestProviderThroughExec(t *testing.T) {
	p, api, root := newRigProvider(t, nil)
	ctx := execContext(t)
	s := sandbox.Session{ID: "edit_Abc-1", ProjectID: 7, UID: 3_000_001}
	if _, err := p.Run(ctx, s, sandbox.Command{Argv: []string{"true"}}); err == nil {
		t.Fatal("a command ran before Prepare")
	}
	prepared, err := p.Prepare(ctx, s, tarBase{"a.txt": "one\n", "dir/b.txt": "two\n"})
	if err != nil {
		t.Fatal(err)
	}
	if !prepared.Fresh || !prepared.Layered {
		t.Fatalf("first Prepare: %+v", prepared)
	}
	if again, err := p.Prepare(ctx, s, tarBase{}); err != nil || again.Fresh {
		t.Fatalf("second Prepare: %+v %v", again, err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "dir", "b.txt")); string(got) != "two\n" {
		t.Fatalf("the base in the pod: %q", got)
	}
	if err := p.Write(ctx, s, sandbox.File{Path: "c.txt", Content: []byte("three\n"), Exists: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ctx, s, sandbox.File{Path: "a.txt"}); err != nil {
		t.Fatal(err)
	}

	var live bytes.Buffer
	res, err := p.Run(ctx, s, sandbox.Command{Argv: sandbox.CommandArgv("cat dir/b.txt c.txt; echo oops >&2; exit 3"), Output: &live})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "two\nthree\n" || string(res.Stderr) != "oops\n" || !strings.Contains(live.String(), "three") {
		t.Fatalf("command: %+v, live %q", res, live.String())
	}
	began := time.Now()
	res, err = p.Run(ctx, s, sandbox.Command{Argv: sandbox.CommandArgv("sleep 30"), Limits: sandbox.Limits{Timeout: 300 * time.Millisecond, TimeoutExit: 124}})
	if err != nil || !res.TimedOut || res.ExitCode != 124 || time.Since(began) > 10*time.Second {
		t.Fatalf("timed out command: %+v %v after %v", res, err, time.Since(began))
	}
	_, err = p.Run(ctx, s, sandbox.Command{Argv: sandbox.CommandArgv("head -c 300000 /dev/zero"), Limits: sandbox.Limits{MaxStream: 1000}})
	if !errors.Is(err, sandbox.ErrOverflow) {
		t.Fatalf("output past its bound: %v", err)
	}

	if _, err := p.Run(ctx, s, sandbox.Command{Argv: sandbox.CommandArgv("echo new > d.txt && echo changed > dir/b.txt && mkfifo pipe")}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	err = p.Changed(ctx, s, 8, func(e sandbox.Entry) error {
		switch e.Kind {
		case sandbox.KindFile:
			buf := make([]byte, 1024)
			n, st, err := e.Look.ReadFile(buf)
			if err != nil || !st.Regular {
				t.Errorf("reading %s: %v %+v", e.Path, err, st)
			}
			seen[e.Path] = string(buf[:n])
		case sandbox.KindWhiteout:
			seen[e.Path] = "(gone)"
		case sandbox.KindOther:
			seen[e.Path] = "(other)"
		default:
			seen[e.Path] = "(kind)"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.txt": "(gone)", "c.txt": "three\n", "d.txt": "new\n", "dir/b.txt": "changed\n", "pipe": "(other)"}
	if len(seen) != len(want) {
		t.Fatalf("changed: %v, want %v", seen, want)
	}
	for k, v := range want {
		if seen[k] != v {
			t.Fatalf("changed: %v, want %v", seen, want)
		}
	}
	// A visit that stops the walk (a capture out of time) ends it at
	// once without an error, and a visit's error is the walk's, not the
	// exec's cancelled context that follows it.
	visited := 0
	if err := p.Changed(ctx, s, 8, func(sandbox.Entry) error { visited++; return fs.SkipAll }); err != nil || visited != 1 {
		t.Fatalf("a walk stopped at its first entry: %d visits, %v", visited, err)
	}
	refused := errors.New("refused by the visit")
	if err := p.Changed(ctx, s, 8, func(sandbox.Entry) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("a visit's error became %v", err)
	}

	console, err := p.Start(ctx, s, 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	var screen liveOutput
	go io.Copy(&screen, console)
	if err := console.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := console.Write([]byte("echo sum-$((20+22)); stty size\n")); err != nil {
		t.Fatal(err)
	}
	screen.waitFor(t, "sum-42")
	screen.waitFor(t, "40 120")
	if err := console.Kill(); err != nil {
		t.Fatal(err)
	}
	if exit, _ := console.Wait(); exit.Code != -1 {
		t.Fatalf("a killed shell: %+v", exit)
	}

	if err := p.End(ctx, s); err != nil {
		t.Fatal(err)
	}
	wait.For(t, wait.Short, "the session's pod to be deleted", func() bool { return len(api.storedPods(testConfig().Namespace)) == 0 })
	if _, err := p.Run(ctx, s, sandbox.Command{Argv: []string{"true"}}); err == nil {
		t.Fatal("a command ran after End")
	}
}

// A walk's visits read the files they want, whether the helper sent the
// file's entry or named it as known: a file met before and unchanged
// goes by its number. A read after its visit is refused.
func TestChangedReadsWhatTheVisitsWant(t *testing.T) {
	p, _, _ := newRigProvider(t, nil)
	ctx := execContext(t)
	s := sandbox.Session{ID: "edit_known", ProjectID: 7}
	if _, err := p.Prepare(ctx, s, tarBase{"base.txt": "base\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(ctx, s, sandbox.Command{Argv: sandbox.CommandArgv("echo one > one.txt; echo two > two.txt")}); err != nil {
		t.Fatal(err)
	}
	// walk answers, per file changed and read, its content or the error
	// reading it gave; read says which files a visit reads.
	var looks []sandbox.Looker
	walk := func(read func(path string) bool) map[string]string {
		got := map[string]string{}
		err := p.Changed(ctx, s, 8, func(e sandbox.Entry) error {
			looks = append(looks, e.Look)
			if e.Kind != sandbox.KindFile || !read(e.Path) {
				return nil
			}
			buf := make([]byte, 64)
			n, _, err := e.Look.ReadFile(buf)
			if err != nil {
				got[e.Path] = err.Error()
			} else {
				got[e.Path] = string(buf[:n])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	all := func(string) bool { return true }
	if got := walk(all); len(got) != 2 || got["one.txt"] != "one\n" || got["two.txt"] != "two\n" {
		t.Fatalf("the first walk: %q", got)
	}
	if known := p.live[s.ID].known; len(known) != 2 {
		t.Fatalf("known after a walk: %v", known)
	}
	if got := walk(func(p string) bool { return p == "two.txt" }); len(got) != 1 || got["two.txt"] != "two\n" {
		t.Fatalf("a walk reading one known file: %q", got)
	}
	if _, err := p.Run(ctx, s, sandbox.Command{Argv: sandbox.CommandArgv("echo three > one.txt")}); err != nil {
		t.Fatal(err)
	}
	if got := walk(all); got["one.txt"] != "three\n" || got["two.txt"] != "two\n" {
		t.Fatalf("after a change: %q", got)
	}
	if _, _, err := looks[len(looks)-1].ReadFile(make([]byte, 64)); !errors.Is(err, errLateRead) {
		t.Fatalf("a read after the walk: %v", err)
	}
}

// A pod's helper that answers nothing (the session's code stopped it; it
// shares its user) holds the server no longer than the command's timeout
// and a grace.
func TestASilentHelperTimesOut(t *testing.T) {
	p, _, _ := newRigProvider(t, nil)
	ctx := execContext(t)
	s := sandbox.Session{ID: "edit_silent", ProjectID: 7, UID: 3_000_002}
	if _, err := p.Prepare(ctx, s, tarBase{"a.txt": "a\n"}); err != nil {
		t.Fatal(err)
	}
	silent := filepath.Join(t.TempDir(), "silent")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.cfg.Helper, p.grace = silent, 500*time.Millisecond
	began := time.Now()
	_, err := p.Run(ctx, s, sandbox.Command{Argv: []string{"true"}, Limits: sandbox.Limits{Timeout: 300 * time.Millisecond}})
	if !errors.Is(err, sandbox.ErrTimeout) || time.Since(began) > 10*time.Second {
		t.Fatalf("a silent helper: %v after %v", err, time.Since(began))
	}
}

// A helper taken over that sends more entries than its bound, or names
// known files the server never sent, fails the walk with an error:
// nothing it says is taken on trust.
func TestAHelperTakenOverFailsTheWalk(t *testing.T) {
	p, _, _ := newRigProvider(t, nil)
	ctx := execContext(t)
	s := sandbox.Session{ID: "edit_lying", ProjectID: 7}
	if _, err := p.Prepare(ctx, s, tarBase{"a.txt": "a\n"}); err != nil {
		t.Fatal(err)
	}
	// Past the bound it was given, whatever each entry is.
	many := filepath.Join(t.TempDir(), "many")
	manyEntries := "#!/bin/sh\nexec python3 -c 'import sys, time; e=b\"{\\\"path\\\":\\\"x\\\",\\\"kind\\\":\\\"dir\\\",\\\"mode\\\":493}\"; f=b\"f\"+len(e).to_bytes(4,\"big\")+e; sys.stdout.buffer.write((f*1024+b\"a\\0\\0\\0\\0\")*196); sys.stdout.flush(); time.sleep(60)'\n"
	if err := os.WriteFile(many, []byte(manyEntries), 0o755); err != nil {
		t.Fatal(err)
	}
	p.cfg.Helper = many
	visits := 0
	err := p.Changed(ctx, s, 8, func(sandbox.Entry) error { visits++; return nil })
	if err == nil || !strings.Contains(err.Error(), "more than 200000 entries") || visits != 195*1024 {
		t.Fatalf("a helper past its bound: %d visits, %v", visits, err)
	}
	for _, frames := range []string{
		`printf 'k\000\000\000\00299'`,                    // no known file has line 99
		`printf 'k\000\000\000\002-1'`,                    // nor line -1
		`printf 'k\000\000\000\024999999999999999999999'`, // nor a number past int
	} {
		lying := filepath.Join(t.TempDir(), "lying")
		script := "#!/bin/sh\n" + frames + "\nprintf 's\\000\\000\\000\\002{}'\n"
		if err := os.WriteFile(lying, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		p.cfg.Helper = lying
		err := p.Changed(ctx, s, 8, func(sandbox.Entry) error { t.Fatal("a visit of a file the helper made up"); return nil })
		if err == nil || !strings.Contains(err.Error(), "a known file of no line") {
			t.Fatalf("%s: %v", frames, err)
		}
	}
	// Frames as a python script writes them; it waits after them unless
	// it sent a status.
	for _, tc := range []struct{ name, frames, want string }{
		{"a batch past its bound", `fr(b"f", b'{"path":"x","kind":"dir","mode":493}')` + "\n" + `for _ in range(1025): fr(b"f", b'{"path":"x","kind":"dir","mode":493}')`,
			"more than 1024 entries or 1048576 bytes of paths without asking"},
		{"a batch of long paths past its bound", `p=b"x"*60000` + "\n" + `for i in range(20): fr(b"f", b'{"path":"' + p + b'%d","kind":"dir","mode":493}' % i)`,
			"more than 1024 entries or 1048576 bytes of paths without asking"},
		{"an answer for another file", `fr(b"f", b'{"path":"x","kind":"file","mode":420,"size":1}'); fr(b"a", b""); fr(b"f", b'{"path":"y","kind":"file","mode":420,"size":1,"content":true}'); fr(b"c", b"y")`,
			`asked for "x", the helper answered for "y"`},
		{"no ask for the last batch", `fr(b"f", b'{"path":"x","kind":"dir","mode":493}'); fr(b"s", b"{}"); sys.exit(0)`,
			"ended without asking for its last 1 entries"},
	} {
		lying := filepath.Join(t.TempDir(), "lying")
		script := "#!/bin/sh\nexec python3 -c '\nimport sys, time\ndef fr(k, b): sys.stdout.buffer.write(k+len(b).to_bytes(4, \"big\")+b)\n" +
			strings.ReplaceAll(tc.frames, "'", `'"'"'`) + "\nsys.stdout.flush(); time.sleep(60)'\n"
		if err := os.WriteFile(lying, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		p.cfg.Helper = lying
		err := p.Changed(ctx, s, 8, func(e sandbox.Entry) error {
			if e.Kind == sandbox.KindFile {
				_, _, err := e.Look.ReadFile(make([]byte, 8))
				return err
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
}

// Recover deletes the pods of the sessions it is given (their holder is
// gone) and of sessions no longer open: the sessions it is given are this
// instance's share, not all the open ones, and the pods of sessions other
// instances hold stay.
func TestRecoverLeavesOtherInstancesPods(t *testing.T) {
	mine := sandbox.Session{ID: "edit_mine", ProjectID: 1}
	theirs := sandbox.Session{ID: "edit_theirs", ProjectID: 1}
	closed := sandbox.Session{ID: "edit_closed", ProjectID: 1}
	p, api, _ := newRigProvider(t, func(_ context.Context, ids []string) (map[string]bool, error) {
		return map[string]bool{mine.ID: true, theirs.ID: true}, nil
	})
	ctx := execContext(t)
	for _, s := range []sandbox.Session{mine, theirs, closed} {
		if _, err := p.cluster.createSessionPod(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Recover(ctx, []sandbox.Session{mine}); err != nil {
		t.Fatal(err)
	}
	pods := api.storedPods(testConfig().Namespace)
	if len(pods) != 1 || pods[0].Annotations[annotationID] != theirs.ID {
		t.Fatalf("after Recover: %v", names(pods))
	}
}
