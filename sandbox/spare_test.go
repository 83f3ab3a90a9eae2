//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

// spareHelpers are the spare helpers of this process still alive.
func spareHelpers(t *testing.T) []string {
	t.Helper()
	return helpers(t, func(cmdline string) bool { return strings.HasPrefix(cmdline, spareCmdline) })
}

// commandHelpers are the helpers of this process running a command (not
// waiting as spares).
func commandHelpers(t *testing.T) []string {
	t.Helper()
	return helpers(t, func(cmdline string) bool {
		return strings.HasPrefix(cmdline, "atelier-sandbox-init\x00") && !strings.HasPrefix(cmdline, spareCmdline)
	})
}

const spareCmdline = "atelier-sandbox-init\x00spare\x00"

// helpers are the live children of this process whose command line is
// one match takes.
func helpers(t *testing.T, match func(cmdline string) bool) []string {
	t.Helper()
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		stat, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || err2 != nil || !match(string(cmdline)) {
			continue
		}
		// Ours: its parent is this process. A zombie does not count.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) && fields[0] != "Z" {
			found = append(found, e.Name())
		}
	}
	return found
}

// TestSpareRunsOneCommandInTheSameJail: a command handed to a helper
// started ahead runs as the session's user in the same jail as any (the
// allow-list root, its output and exit code); the spare serves one command
// only, after which Run starts helpers afresh; and a spare nobody used
// ends with Close.
func TestSpareRunsOneCommandInTheSameJail(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	spare, err := sb.Spare(s.uid)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	if len(spareHelpers(t)) != 1 {
		t.Fatalf("spare helpers %v, want one", spareHelpers(t))
	}
	// The network as a command without it sees it: loopback up (a closed
	// port refuses), nothing else (no route out).
	const network = "(exec 3<>/dev/tcp/127.0.0.1/9) 2>&1 | tail -n 1; (exec 3<>/dev/tcp/192.0.2.1/9) 2>&1 | tail -n 1"
	plain := s.mustRun(t, "ls -A /; id -u; "+network)
	if !strings.Contains(plain, "Connection refused") || !strings.Contains(plain, "Network is unreachable") {
		t.Fatalf("a command without the network, no spare:\n%s", plain)
	}
	spec := s.spec("ls -A /; id -u; " + network + "; echo to-stderr >&2; touch /workspace/by-spare; exit 3")
	spec.Spare = spare
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != plain || string(res.Stderr) != "to-stderr\n" {
		t.Fatalf("through the spare: exit %d\nstdout %q\nwant   %q\nstderr %q", res.ExitCode, res.Stdout, plain, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "by-spare")); err != nil {
		t.Fatalf("the command's file in the checkout: %v", err)
	}
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("spare helpers left after its command: %v", got)
	}
	// Taken: the same Spare again starts a helper of its own.
	spec.Spare = spare
	if res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second}); err != nil || res.ExitCode != 3 {
		t.Fatalf("a used spare again: %+v %v", res, err)
	}

	unused, err := sb.Spare(s.uid)
	if err != nil {
		t.Fatal(err)
	}
	unused.Close()
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("a closed spare still runs: %v", got)
	}
}

// niceOf is the nice value of pid's main thread.
func niceOf(t *testing.T, pid string) int {
	t.Helper()
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	n, err := strconv.Atoi(fields[16]) // field 19 of proc(5), counted after the name
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSpareWaitsInItsUidsGroups: a spare joins its uid's cgroups while it
// waits, at a low priority, so its command starts inside them without a
// move, at the normal priority; a KillAll of
// the uid ends it; and a spare of one session handed another session's
// command (a mistake of the caller) is ended, the command running in its
// own uid's groups, never the other session's.
func TestSpareWaitsInItsUidsGroups(t *testing.T) {
	sb := newSandbox(t, nil)
	if sb.CgroupMode() == "" {
		t.Skip("precondition: writable cgroups; without them a spare has no group to wait in")
	}
	a, b := newSession(t, sb), newSession(t, sb)
	groupOf := func(uid uint32) string { return "/u" + strconv.FormatUint(uint64(uid), 10) + "\n" }
	spare, err := sb.Spare(a.uid)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	pids := spareHelpers(t)
	if len(pids) != 1 {
		t.Fatalf("spare helpers %v, want one", pids)
	}
	inGroups := func(pid string, uid uint32) bool {
		cg, _ := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
		return strings.Contains(string(cg), groupOf(uid))
	}
	if !wait.Until(wait.Long, func() bool { return inGroups(pids[0], a.uid) }) {
		cg, _ := os.ReadFile(filepath.Join("/proc", pids[0], "cgroup"))
		t.Fatalf("the waiting spare is not in uid %d's groups:\n%s", a.uid, cg)
	}

	spec := b.spec("cat /proc/self/cgroup")
	spec.Spare = spare
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if out := string(res.Stdout); strings.Contains(out, groupOf(a.uid)) || !strings.Contains(out, groupOf(b.uid)) {
		t.Fatalf("session %d's command through session %d's spare is in these groups:\n%s", b.uid, a.uid, out)
	}
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("a spare handed another uid's command still runs: %v", got)
	}

	// Its own uid's command, at the normal priority though the spare
	// waited at a low one.
	spare, err = sb.Spare(a.uid)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	pids = spareHelpers(t)
	if len(pids) != 1 {
		t.Fatalf("spare helpers %v, want one", pids)
	}
	if n := niceOf(t, pids[0]); n <= 0 {
		t.Errorf("a waiting spare's nice value is %d, want it lowered", n)
	}
	spec = a.spec("read -a f < /proc/self/stat; echo nice ${f[18]}; cat /proc/self/cgroup")
	spec.Spare = spare
	wait.For(t, wait.Long, "the spare to wait in its uid's groups", func() bool { return inGroups(pids[0], a.uid) })
	res, err = sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), groupOf(a.uid)) {
		t.Fatalf("its own uid's command: %+v %v", res, err)
	}
	if !strings.HasPrefix(string(res.Stdout), "nice 0\n") {
		t.Errorf("the command through a spare runs at another priority than the normal one:\n%s", res.Stdout)
	}

	waiting, err := sb.Spare(a.uid)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	wait.For(t, wait.Long, "the new spare to wait in its uid's groups", func() bool {
		pids := spareHelpers(t)
		return len(pids) == 1 && inGroups(pids[0], a.uid)
	})
	if err := sb.KillAll(context.Background(), a.uid); err != nil {
		t.Fatal(err)
	}
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("a spare waiting in the groups of a killed uid still runs: %v", got)
	}
}

// TestSpareIsNotForStdinOrAllow: a command with a stdin, or with the
// network allowed, needs what a spare cannot have; Run ends the spare and
// starts a helper afresh, and the command gets its stdin.
func TestSpareIsNotForStdinOrAllow(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	spare, err := sb.Spare(s.uid)
	if err != nil {
		t.Fatal(err)
	}
	spec := s.spec("cat")
	spec.Stdin = strings.NewReader("from stdin\n")
	spec.Spare = spare
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil || string(res.Stdout) != "from stdin\n" {
		t.Fatalf("with a stdin: %+v %v", res, err)
	}
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("the spare of a command with a stdin still runs: %v", got)
	}
}

// TestLayersSayWhatChanged: the upper folder of a checkout's overlay holds
// exactly what commands wrote, deleted, renamed and replaced, marked as
// such, and nothing of what they left alone.
func TestLayersSayWhatChanged(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	top := filepath.Dir(s.dir)
	lower, upper, work := filepath.Join(top, "lower"), filepath.Join(top, "upper"), filepath.Join(top, "work")
	for _, p := range []string{"same/a.txt", "edit/b.txt", "del/c.txt", "tree/d/e.txt", "ren/f.txt", "swap/g.txt", "swap/h.txt"} {
		full := filepath.Join(lower, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := chownAll(lower, s.uid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(upper, int(s.uid), int(s.uid)); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.MountLayers(lower, upper, work, s.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sandbox.UnmountLayers(s.dir); err != nil {
			t.Error(err)
		}
	})
	s.mustRun(t, `echo x >> edit/b.txt; rm del/c.txt; rm -r tree; mv ren ren2; rm -r swap && mkdir swap && echo n > swap/new.txt; chmod 600 same/a.txt`)
	var got []string
	err := sandbox.WalkTree(upper, sandbox.WalkOptions{MaxDepth: 64, Upper: true}, func(e *sandbox.TreeEntry) error {
		mark := ""
		switch {
		case e.Kind == sandbox.KindWhiteout:
			mark = " (deleted)"
		case e.Opaque:
			mark = " (replaced folder)"
		case e.Kind == sandbox.KindDir:
			mark = "/"
		}
		got = append(got, e.Path+mark)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{"del/", "del/c.txt (deleted)", "edit/", "edit/b.txt", "ren (deleted)", "ren2/", "ren2/f.txt",
		"same/", "same/a.txt", "swap (replaced folder)", "swap/new.txt", "tree (deleted)"}
	if !slices.Equal(got, want) {
		t.Fatalf("upper folder:\n got %q\nwant %q", got, want)
	}
	if err := sandbox.UnmountLayers(s.dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
		t.Fatalf("the checkout still shows %d entries once unmounted", len(entries))
	}
}

func chownAll(dir string, uid uint32) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(uid))
	})
}

// TestDeadSpareStartsAfresh: a spare that died before its command (killed
// from outside here) costs the command nothing but a fresh helper.
func TestDeadSpareStartsAfresh(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	spare, err := sb.Spare(s.uid)
	if err != nil {
		t.Fatal(err)
	}
	pids := spareHelpers(t)
	if len(pids) != 1 {
		t.Fatalf("spare helpers %v, want one", pids)
	}
	pid, _ := strconv.Atoi(pids[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Dead: a zombie, whose files the kernel has closed.
	if !wait.Until(wait.Short, func() bool {
		stat, err := os.ReadFile(filepath.Join("/proc", pids[0], "stat"))
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		return err == nil && len(fields) > 0 && fields[0] == "Z"
	}) {
		t.Fatal("the spare did not die")
	}
	spec := s.spec("echo fresh")
	spec.Spare = spare
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "fresh\n" {
		t.Fatalf("after the spare died: %+v %v", res, err)
	}
}

// serverThreads maps each thread of this process to its nice value.
func serverThreads(t *testing.T) map[string]string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	nice := map[string]string{}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "stat"))
		if err != nil {
			continue // ended meanwhile
		}
		// After the name: state is field 3, nice field 19.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		nice[task.Name()] = fields[16]
	}
	return nice
}

// TestSparesLeaveTheServersThreadsAlone: starting spare helpers lowers the
// priority of no thread of the server for good, and ends none of its
// threads (a child whose parent-death signal is tied to a thread would die
// with it).
func TestSparesLeaveTheServersThreadsAlone(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	before := serverThreads(t)
	for range 8 {
		spare, err := sb.Spare(s.uid)
		if err != nil {
			t.Fatal(err)
		}
		spare.Close()
	}
	after := serverThreads(t)
	for tid := range before {
		if _, ok := after[tid]; !ok {
			t.Errorf("thread %s ended while spares started", tid)
		}
	}
	for tid, nice := range after {
		if nice != "0" {
			t.Errorf("thread %s is left at nice %s", tid, nice)
		}
	}
}

// TestSpareOfACanceledCommandEnds: a command whose context ended before
// it started does not run, and its spare helper is ended with it rather
// than left waiting out its time.
func TestSpareOfACanceledCommandEnds(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	spare, err := sb.Spare(s.uid)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	spec := s.spec("touch /workspace/ran")
	spec.Spare = spare
	if _, err := sb.Run(ctx, spec, sandbox.Limits{Timeout: 30 * time.Second}); !errors.Is(err, sandbox.ErrCanceled) {
		t.Fatalf("a canceled command: %v, want ErrCanceled", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "ran")); err == nil {
		t.Fatal("the canceled command ran")
	}
	if got := spareHelpers(t); len(got) != 0 {
		t.Fatalf("the canceled command's spare still runs: %v", got)
	}
}

// TestStartedComesOnceTheCommandRuns: Spec.Started is called once, when
// the command's helper is up (Local starts the next commands' spares
// then, so that they do not slow this one's start), and not for a
// command that never started.
func TestStartedComesOnceTheCommandRuns(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	var calls int
	var helpersThen []string
	// Long enough that its helper is still there when Started looks.
	spec := s.spec("echo ran; sleep 1")
	spec.Started = func() {
		calls++
		helpersThen = commandHelpers(t)
	}
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil || string(res.Stdout) != "ran\n" {
		t.Fatalf("%+v %v", res, err)
	}
	if calls != 1 || len(helpersThen) != 1 {
		t.Fatalf("Started called %d times, with the command's helpers %v: want once, with one", calls, helpersThen)
	}

	calls = 0
	spec = s.spec("")
	spec.Argv = []string{"/no/such/program"}
	spec.Started = func() { calls++ }
	if _, err := sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second}); err == nil {
		t.Fatal("a missing program started")
	}
	if calls != 0 {
		t.Fatalf("Started called %d times for a command that never started", calls)
	}
}
