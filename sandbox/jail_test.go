//go:build linux

package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

// TestJailShowsOnlyTheAllowList looks around from inside: / holds the
// allowed folders and nothing else of the host, the system folders are
// read-only, and the user has a name, a home and the host's Go.
func TestJailShowsOnlyTheAllowList(t *testing.T) {
	sb := newSandbox(t, nil)
	a, b := newSession(t, sb), newSession(t, sb)
	if err := os.WriteFile(filepath.Join(b.dir, "notes.txt"), []byte("b's\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	want := []string{"dev", "home", "proc", "tmp", "workspace"}
	for _, p := range sandbox.DefaultROPaths {
		if _, err := os.Lstat(p); err == nil {
			want = append(want, strings.TrimPrefix(p, "/"))
		}
	}
	slices.Sort(want)
	if got := lines([]byte(a.mustRun(t, "ls -A /"))); !slices.Equal(got, want) {
		t.Errorf("ls / = %q, want %q", got, want)
	}

	// The host's folders beyond the list, the data folder around the
	// checkouts, another session's checkout: none is there.
	for _, path := range []string{"/root", "/srv", "/var", "/home/" + filepath.Base(os.Getenv("HOME")),
		filepath.Dir(a.dir), b.dir, b.dir + "/notes.txt", os.TempDir() + "/" + filepath.Base(filepath.Dir(filepath.Dir(a.dir)))} {
		if stderr := a.mustFail(t, "ls "+path); !strings.Contains(stderr, "No such file") {
			t.Errorf("ls %s failed, but not for being absent: %s", path, stderr)
		}
	}
	for _, script := range []string{"touch /usr/x", "touch /etc/x", "touch /x", "echo x >> /etc/passwd", "mkdir /home/x"} {
		if stderr := a.mustFail(t, script); !strings.Contains(stderr, "Read-only file system") && !strings.Contains(stderr, "Permission denied") {
			t.Errorf("%q failed, but not for being read-only: %s", script, stderr)
		}
	}

	out := a.mustRun(t, `id -un; id -gn; echo $HOME; cd; pwd; grep ^atelier: /etc/passwd; hostname; touch ~/h /tmp/t /workspace/w && echo writable`)
	uid := strconv.FormatUint(uint64(a.uid), 10)
	wantOut := []string{"atelier", "atelier", "/home/atelier", "/home/atelier",
		"atelier:x:" + uid + ":" + uid + "::/home/atelier:/bin/bash", "atelier", "writable"}
	if got := lines([]byte(out)); !slices.Equal(got, wantOut) {
		t.Errorf("identity inside:\n got %q\nwant %q", got, wantOut)
	}
	for name, host := range map[string]string{"h": a.home, "t": a.tmp, "w": a.dir} {
		if _, err := os.Stat(filepath.Join(host, name)); err != nil {
			t.Errorf("%s written inside is not in the session's folder %s: %v", name, host, err)
		}
	}

	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Log("no Go at /usr/local/go on this host; not checking the toolchain")
		return
	}
	out = a.mustRun(t, "go version && go env GOCACHE")
	if got := lines([]byte(out)); len(got) != 2 || !strings.HasPrefix(got[0], "go version go") || !strings.HasPrefix(got[1], "/home/atelier/") {
		t.Errorf("go inside: %q", out)
	}
}

// TestJailHidesOtherCommands: a secret in a command's arguments is not in
// another session's ps, nor its /tmp in the other's, and /dev/shm lasts
// one command.
func TestJailHidesOtherCommands(t *testing.T) {
	sb := newSandbox(t, nil)
	a, b := newSession(t, sb), newSession(t, sb)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.sb.Run(context.Background(), a.spec("echo x > /tmp/a-file; echo y > /dev/shm/a-shm; (exec -a \"worker --api-key=sk-SECRET-KEY\" sleep 5)"), sandbox.Limits{Timeout: 30 * time.Second})
	}()
	defer wg.Wait()
	if !wait.Until(wait.Short, func() bool {
		// The secret is there for the host to see.
		for _, p := range procsOf(a.uid) {
			cmdline, _ := os.ReadFile("/proc/" + p[:strings.IndexByte(p, '(')] + "/cmdline")
			if strings.Contains(string(cmdline), "sk-SECRET-KEY") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("a's command did not start")
	}
	out := b.mustRun(t, "ps -eo pid,args; ls -A /tmp /dev/shm")
	if strings.Contains(out, "SECRET") || strings.Contains(out, "a-file") || strings.Contains(out, "a-shm") {
		t.Errorf("b sees a's command:\n%s", out)
	}
	if ps := lines([]byte(out)); len(ps) < 2 || !strings.Contains(ps[1], "atelier-sandbox-init") {
		t.Errorf("b's ps does not start with its own init:\n%s", out)
	}
	// b's own view: only the processes of its command (bash execs ps).
	if got := strings.Fields(b.mustRun(t, "ps -e -o pid=")); len(got) != 2 || got[0] != "1" {
		t.Errorf("b's ps lists %q, want its init and itself", got)
	}
	wg.Wait()
	// /dev/shm is small and the command's own.
	if stderr := b.mustFail(t, "head -c 80M /dev/zero > /dev/shm/big"); !strings.Contains(stderr, "No space left") {
		t.Errorf("80 MiB into /dev/shm: %s", stderr)
	}
	// The session's /tmp stays for its next command; /dev/shm does not,
	// and nothing reached the host's.
	if out := a.mustRun(t, "cat /tmp/a-file; ls -A /dev/shm"); out != "x\n" {
		t.Errorf("a's next command: %q, want its /tmp file and an empty /dev/shm", out)
	}
	if _, err := os.Stat("/dev/shm/a-shm"); err == nil {
		t.Error("a's /dev/shm file is in the host's /dev/shm")
	}
}

// TestShellOutlivesACommand: a one-shot command of the session ends only
// its own processes, not the session's terminal and what runs there;
// KillAll, the session's end, ends both.
func TestShellOutlivesACommand(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	term := openPTY(t)
	spec := sandbox.Spec{UID: s.uid, GID: s.uid, Workspace: s.dir, Dir: s.dir, Home: s.home, Tmp: s.tmp, TTY: term.slave,
		Argv: []string{"/bin/bash", "--noprofile", "--norc", "-i"}, ExtraEnv: []string{"TERM=xterm"}}
	p, err := sb.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	term.slave.Close()
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	term.write(t, "sleep 500 & echo STARTED\n")
	term.expect(t, "STARTED")
	sleeping := func() bool {
		for _, p := range procsOf(s.uid) {
			if strings.Contains(p, "(sleep ") {
				return true
			}
		}
		return false
	}
	if !wait.Until(wait.Short, sleeping) {
		t.Fatal("the shell's sleep did not start")
	}

	if out := s.mustRun(t, "kill -9 -1; sleep 0.2; echo done"); out != "done\n" {
		t.Errorf("the command: %q", out)
	}
	if !sleeping() {
		t.Error("the one-shot command ended the shell's sleep")
	}
	select {
	case err := <-waited:
		t.Fatalf("the one-shot command ended the shell: %v", err)
	default:
	}
	term.write(t, "echo STILL-$((20+22))\n")
	term.expect(t, "STILL-42")

	if err := sb.KillAll(context.Background(), s.uid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("KillAll did not end the shell")
	}
	if left := procsOf(s.uid); len(left) > 0 {
		t.Errorf("left after KillAll: %v", left)
	}
}

// The mount table a command reads names no folder of the host's: not
// the data folder the session's folders are in, nor any of them. The
// overlay of the checkout and the session's disk are laid out as the
// server lays them out.
func TestMountTableNamesNoHostFolder(t *testing.T) {
	sb := newSandbox(t, nil)
	for _, c := range []struct {
		name          string
		disk, layered bool
	}{
		{"overlay checkout on a disk", true, true},
		{"plain checkout on a disk", true, false}, // a host without overlay, and checks
		{"overlay checkout without a disk", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, data := sessionLaidOut(t, sb, c.disk, c.layered)
			host := []string{data, s.dir, s.home, s.tmp}
			out := s.mustRun(t, "cat /proc/self/mountinfo; echo; cat /proc/self/mounts")
			info, mounts, _ := strings.Cut(out, "\n\n")
			for _, line := range lines([]byte(info)) {
				// id, parent, device, root, then where and how it is
				// mounted, its type, source and options.
				f := strings.Fields(line)
				if len(f) < 10 {
					t.Fatalf("mountinfo line %q", line)
				}
				root, rest := f[3], strings.Join(f[4:], " ")
				// Without a disk, HOME and /tmp are binds of folders of
				// the host's file system, and the kernel shows a bind's
				// root as its path within that file system: only a file
				// system of the session's own hides it.
				checkRoot := c.disk || f[4] == "/workspace"
				for _, h := range host {
					if strings.Contains(rest, h) || checkRoot && strings.Contains(root, h) {
						t.Errorf("mountinfo names %s: %s", h, line)
					}
				}
			}
			for _, line := range lines([]byte(mounts)) {
				for _, h := range host {
					if strings.Contains(line, h) {
						t.Errorf("mounts names %s: %s", h, line)
					}
				}
			}
			if !strings.Contains(info, " /workspace ") {
				t.Errorf("no /workspace in the mount table:\n%s", info)
			}
		})
	}
}

// sessionLaidOut is a session whose folders lie as the server lays them
// out: checkout, home and tmp in one folder of data, the test's data
// folder, on a disk of the session's own when disk is set; the checkout is
// an overlay of the base (lower) and what was written (upper) when
// layered.
func sessionLaidOut(t *testing.T, sb *sandbox.Sandbox, disk, layered bool) (s *session, data string) {
	t.Helper()
	area := openDir(t)
	top := filepath.Join(area, "session-1")
	if disk {
		image := filepath.Join(t.TempDir(), "1.img")
		if err := sandbox.MountDisk(image, top, sandbox.MinDiskBytes); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := sandbox.UnmountDisk(image, top); err != nil {
				t.Error(err)
			}
		})
	} else if err := os.Mkdir(top, 0o711); err != nil {
		t.Fatal(err)
	}
	s = newSession(t, sb)
	s.dir, s.home, s.tmp = filepath.Join(top, "checkout"), filepath.Join(top, "home"), filepath.Join(top, "tmp")
	for _, d := range []string{s.home, s.tmp} {
		if err := sandbox.PrepareDir(d, s.uid, s.uid); err != nil {
			t.Fatal(err)
		}
	}
	if !layered {
		if err := sandbox.PrepareDir(s.dir, s.uid, s.uid); err != nil {
			t.Fatal(err)
		}
		return s, filepath.Dir(area)
	}
	lower, upper, work := filepath.Join(top, "lower"), filepath.Join(top, "upper"), filepath.Join(top, "work")
	for _, d := range []string{lower, upper, work, s.dir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{lower, upper} {
		if err := os.Chown(d, int(s.uid), int(s.uid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sandbox.MountLayers(lower, upper, work, s.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sandbox.UnmountLayers(s.dir); err != nil {
			t.Error(err)
		}
	})
	return s, filepath.Dir(area)
}
