//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"atelier/sandbox"
	"atelier/testrig/wait"
)

func TestEnvironmentIsClean(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	// Stand-ins for the server's secrets.
	t.Setenv("DATABASE_URL", "postgres://root:secret@db/atelier")
	t.Setenv("INTERNAL_TOKEN", "t0ken")

	spec := s.spec("")
	spec.Argv = []string{"/usr/bin/env"} // not bash, which adds PWD, SHLVL and _
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	got := lines(res.Stdout)
	slices.Sort(got)
	path := "PATH=/usr/local/bin:/usr/bin:/bin"
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		path += ":/usr/local/go/bin"
	}
	want := []string{"GOCACHE=/home/atelier/.cache/go-build", "GOMODCACHE=/home/atelier/.cache/go-mod", "HOME=/home/atelier",
		"LANG=C.UTF-8", path, "PIP_CACHE_DIR=/home/atelier/.cache/pip", "TERM=dumb", "XDG_CACHE_HOME=/home/atelier/.cache",
		"npm_config_cache=/home/atelier/.cache/npm"}
	if !slices.Equal(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}

	spec.ExtraEnv = []string{"TERM=xterm-256color"}
	res, err = sb.Run(context.Background(), spec, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(lines(res.Stdout), "TERM=xterm-256color") || strings.Contains(string(res.Stdout), "TERM=dumb") {
		t.Errorf("with ExtraEnv TERM: env = %q", res.Stdout)
	}

	spec.ExtraEnv = []string{"DATABASE_URL=x"}
	if _, err := sb.Run(context.Background(), spec, sandbox.Limits{}); !errors.Is(err, sandbox.ErrBadSpec) || !errors.Is(err, sandbox.ErrStart) {
		t.Errorf("ExtraEnv DATABASE_URL: err = %v, want ErrBadSpec as a Start error", err)
	}
}

func TestIdentityAndPrivileges(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	uid := strconv.FormatUint(uint64(s.uid), 10)

	out := s.mustRun(t, `id -u; id -g; id -G; id -un; pwd; umask
		grep -E '^(Groups|NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status`)
	got := lines([]byte(out))
	want := []string{uid, uid, uid, "atelier", "/workspace", "0077",
		"Groups:", "CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"}
	for i := range got {
		got[i] = strings.TrimRight(got[i], " \t")
	}
	if !slices.Equal(got, want) {
		t.Errorf("identity:\n got %q\nwant %q", got, want)
	}

	// A setuid-root binary gives nothing back under no_new_privs.
	if su, err := exec.LookPath("su"); err == nil {
		if out := s.mustRun(t, su+" -c 'id -u' root </dev/null 2>/dev/null || echo refused"); strings.TrimSpace(out) != "refused" {
			t.Errorf("su root: %q", out)
		}
	}
}

func TestServerSecretsOutOfReach(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	// The data folder: root's, 0700, in a folder anyone may pass.
	data := filepath.Join(openDir(t), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "secret"), []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	public := filepath.Join(filepath.Dir(data), "public")
	if err := os.WriteFile(public, []byte("open\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The command can read the system's files and its own environ...
	if out := s.mustRun(t, "grep -c ^root: /etc/passwd; cat /proc/self/environ | tr '\\0' '\\n' | grep ^HOME="); out != "1\nHOME=/home/atelier\n" {
		t.Fatalf("control reads: %q", out)
	}
	// ...but not its init helper's, and nothing of the host outside the
	// allowed folders: neither the server's process nor the data folder,
	// even a file anyone could read there.
	for script, why := range map[string]string{
		"cat /proc/1/environ": "Permission denied",
		"cat /proc/" + strconv.Itoa(os.Getpid()) + "/environ": "No such file",
		"ls " + data:              "No such file",
		"cat " + data + "/secret": "No such file",
		"cat " + public:           "No such file",
	} {
		if stderr := s.mustFail(t, script); !strings.Contains(stderr, why) {
			t.Errorf("%q failed, but not with %q: %s", script, why, stderr)
		}
	}
}

func TestSessionsAreIsolated(t *testing.T) {
	sb := newSandbox(t, nil)
	a, b := newSession(t, sb), newSession(t, sb)
	if err := os.WriteFile(filepath.Join(b.dir, "notes.txt"), []byte("b's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(b.dir, "notes.txt"), int(b.uid), int(b.uid)); err != nil {
		t.Fatal(err)
	}
	if out := b.mustRun(t, "cat notes.txt"); out != "b's\n" {
		t.Fatalf("b reads its own file: %q", out)
	}
	for _, script := range []string{"ls " + b.dir, "cat " + b.dir + "/notes.txt", "touch " + b.dir + "/x"} {
		a.mustFail(t, script)
	}

	// A root process that is not the server, as a bystander.
	bystander := exec.Command("sleep", "60")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { bystander.Process.Kill(); bystander.Wait() }()

	var wg sync.WaitGroup
	var bRes *sandbox.Result
	var bErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		bRes, bErr = b.sb.Run(context.Background(), b.spec("sleep 3; echo alive"), sandbox.Limits{Timeout: 30 * time.Second})
	}()
	if !wait.Until(wait.Short, func() bool { return len(procsOf(b.uid)) >= 2 }) {
		t.Fatal("b's command did not start")
	}
	if out := a.mustRun(t, "kill -9 -1; echo done"); out != "done\n" {
		t.Errorf("a's kill -9 -1: %q", out)
	}
	wg.Wait()
	if bErr != nil || bRes.ExitCode != 0 || string(bRes.Stdout) != "alive\n" {
		t.Errorf("b's command after a's kill -9 -1: %+v, %v", bRes, bErr)
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(bystander.Process.Pid) + "/stat"); err != nil || strings.Contains(string(st), ") Z ") {
		t.Errorf("the root bystander died: %q, %v", st, err)
	}
}

// cgroupModes are the Config.CgroupRoot values the limit tests run with:
// cgroups where this machine has them, and rlimits only.
var cgroupModes = []string{"", "-"}

func TestLimitsAreInPlace(t *testing.T) {
	const procs, mem = 100, 512 << 20
	for _, root := range cgroupModes {
		t.Run("CgroupRoot="+root, func(t *testing.T) {
			sb := newSandbox(t, func(c *sandbox.Config) { c.MaxProcs, c.MaxMemory, c.CgroupRoot = procs, mem, root })
			s := newSession(t, sb)
			group := "/atelier-sandbox/u" + strconv.FormatUint(uint64(s.uid), 10)
			out := s.mustRun(t, `cat /proc/self/limits /proc/self/cgroup`)
			// The group's limits, read on the host: /sys is not in the jail.
			pidsMax, _ := os.ReadFile("/sys/fs/cgroup/pids" + group + "/pids.max")
			memMax, _ := os.ReadFile("/sys/fs/cgroup/memory" + group + "/memory.limit_in_bytes")
			out += "\n" + string(pidsMax) + string(memMax)
			limit := func(name string) string {
				for _, l := range strings.Split(out, "\n") {
					if rest, ok := strings.CutPrefix(l, name); ok {
						f := strings.Fields(rest)
						return f[0] + " " + f[1]
					}
				}
				return "missing"
			}
			if got := limit("Max processes"); got != "100 100" {
				t.Errorf("RLIMIT_NPROC = %s, want %d", got, procs)
			}
			if got := limit("Max core file size"); got != "0 0" {
				t.Errorf("RLIMIT_CORE = %s, want 0", got)
			}
			switch mode := sb.CgroupMode(); {
			case mode == "" && root == "":
				t.Log("no usable cgroups on this machine")
				fallthrough
			case mode == "":
				// The soft limit is there from the start; the hard one a
				// moment later (the helper sets it once the command runs).
				if got := limit("Max data size"); !strings.HasPrefix(got, "536870912 ") {
					t.Errorf("RLIMIT_DATA = %s, want %d", got, mem)
				}
				if got := s.mustRun(t, "sleep 0.2; ulimit -Hd"); got != strconv.Itoa(mem>>10)+"\n" {
					t.Errorf("hard RLIMIT_DATA = %s KiB, want %d", got, mem>>10)
				}
			case mode == "v1":
				for _, want := range []string{":memory:" + group + "\n", ":pids:" + group + "\n", "\n100\n536870912\n"} {
					if !strings.Contains(out, want) {
						t.Errorf("no %q in:\n%s", want, out)
					}
				}
				if got := limit("Max data size"); got != "unlimited unlimited" {
					t.Errorf("RLIMIT_DATA = %s with a memory cgroup", got)
				}
				// The uid's groups last until its session ends.
				if err := sb.KillAll(context.Background(), s.uid); err != nil {
					t.Fatal(err)
				}
				for _, ctrl := range []string{"memory", "pids"} {
					if _, err := os.Stat("/sys/fs/cgroup/" + ctrl + group); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("the %s group is still there after KillAll: %v", ctrl, err)
					}
				}
			case mode == "v2":
				if !strings.Contains(out, "0::"+group+"\n") {
					t.Errorf("not in cgroup %s:\n%s", group, out)
				}
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	for _, root := range cgroupModes {
		t.Run("CgroupRoot="+root, func(t *testing.T) {
			sb := newSandbox(t, func(c *sandbox.Config) { c.MaxMemory, c.CgroupRoot = 256<<20, root })
			s := newSession(t, sb)
			s.mustRun(t, `python3 -c 'b = b"x" * (64 << 20)'`)
			res, err := s.run(t, `python3 -c 'b = b"x" * (1 << 30); print("allocated")'`)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "allocated") {
				t.Errorf("1 GiB under a 256 MiB limit: %+v", res)
			}
			t.Logf("cgroups %q: 1 GiB: exit %d %s: %s", sb.CgroupMode(), res.ExitCode, res.Signal, lastLine(res.Stderr))
		})
	}
}

func TestIgnoredSignalsAreReset(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	// As when the server was started by nohup: children inherit SIGHUP
	// ignored, as the plain runner shows.
	signal.Ignore(syscall.SIGHUP)
	defer signal.Reset(syscall.SIGHUP)
	res, err := sandbox.RunPlain(context.Background(), []string{"/bin/grep", "SigIgn", "/proc/self/status"}, "/", nil, sandbox.Limits{})
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(res.Stdout)), "0000000000000001") {
		t.Fatalf("control: SIGHUP not ignored in a plain child: %q, %v", res.Stdout, err)
	}
	spec := s.spec("")
	spec.Argv = []string{"/bin/grep", "SigIgn", "/proc/self/status"}
	res, err = sb.Run(context.Background(), spec, sandbox.Limits{})
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(res.Stdout)), "0000000000000000") {
		t.Errorf("sandboxed: %q, %v", res.Stdout, err)
	}
}

func lastLine(b []byte) string {
	l := lines(b)
	return l[len(l)-1]
}

func TestPrepareDir(t *testing.T) {
	needRoot(t)
	root := openDir(t)
	uid := nextUID()

	fresh := filepath.Join(root, "fresh")
	if err := sandbox.PrepareDir(fresh, uid, uid+1); err != nil {
		t.Fatal(err)
	}
	checkOwned(t, fresh, uid, uid+1)

	taken := filepath.Join(root, "taken")
	if err := os.Mkdir(taken, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.PrepareDir(taken, uid, uid); err != nil {
		t.Fatal(err)
	}
	checkOwned(t, taken, uid, uid)

	target := filepath.Join(root, "target")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.PrepareDir(link, uid, uid); !errors.Is(err, sandbox.ErrSymlink) {
		t.Errorf("symlink: err = %v, want ErrSymlink", err)
	}
	checkOwned(t, target, 0, 0) // untouched

	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.PrepareDir(file, uid, uid); err == nil {
		t.Error("a regular file was accepted")
	}
	if err := sandbox.PrepareDir("relative/dir", uid, uid); !errors.Is(err, sandbox.ErrBadSpec) {
		t.Errorf("relative path: err = %v", err)
	}
}

func checkOwned(t *testing.T, path string, uid, gid uint32) {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%u %g %a %F", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.FormatUint(uint64(uid), 10) + " " + strconv.FormatUint(uint64(gid), 10)
	if uid == 0 {
		want += " 755 directory"
	} else {
		want += " 700 directory"
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("%s: %q, want %q", path, got, want)
	}
}

func TestChecks(t *testing.T) {
	needRoot(t)
	for _, cfg := range []sandbox.Config{
		{UIDBase: 1000, UIDCount: 10},
		{UIDBase: 1<<32 - 100, UIDCount: 200},
		{UIDBase: uidBase, UIDCount: 0},
	} {
		if _, err := sandbox.New(cfg); !errors.Is(err, sandbox.ErrBadConfig) {
			t.Errorf("New(%+v): err = %v, want ErrBadConfig", cfg, err)
		}
	}
	if _, err := sandbox.New(sandbox.Config{UIDBase: uidBase, UIDCount: uidCount, CgroupRoot: "/nonexistent"}); !errors.Is(err, sandbox.ErrBadConfig) {
		t.Errorf("New with a missing CgroupRoot: err = %v", err)
	}

	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	for _, uid := range []uint32{0, uidBase - 1, uidBase + uidCount} {
		if err := sb.KillAll(context.Background(), uid); !errors.Is(err, sandbox.ErrBadSpec) {
			t.Errorf("KillAll(%d): err = %v, want ErrBadSpec", uid, err)
		}
	}
	bad := map[string]func(*sandbox.Spec){
		"uid 0":           func(sp *sandbox.Spec) { sp.UID = 0 },
		"gid out":         func(sp *sandbox.Spec) { sp.GID = uidBase + uidCount },
		"relative dir":    func(sp *sandbox.Spec) { sp.Dir = "checkout" },
		"no argv":         func(sp *sandbox.Spec) { sp.Argv = nil },
		"network open":    func(sp *sandbox.Spec) { sp.Network = "open" },
		"tty in Run":      func(sp *sandbox.Spec) { sp.TTY = os.Stdin },
		"unclean home":    func(sp *sandbox.Spec) { sp.Home = s.home + "/../x" },
		"NUL in argument": func(sp *sandbox.Spec) { sp.Argv = []string{"/bin/echo", "a\x00b"} },
	}
	for name, change := range bad {
		spec := s.spec("true")
		change(&spec)
		_, err := sb.Run(context.Background(), spec, sandbox.Limits{})
		var re *sandbox.RunError
		if !errors.As(err, &re) || re.Kind != sandbox.Start || !errors.Is(err, sandbox.ErrBadSpec) {
			t.Errorf("%s: err = %v, want a Start RunError with ErrBadSpec", name, err)
		}
	}
}
