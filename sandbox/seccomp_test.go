//go:build linux

package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The system call filter, tried from the attacker's side: the commands an
// attacker would type, then each refused call made directly (python3's
// ctypes), compared with the same call made by the same uid outside the
// sandbox, which shows it is the filter that refuses and not the missing
// capability.

func TestSyscallFilterRefusesNamespacesAndMounts(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	if out := s.mustRun(t, "grep '^Seccomp:' /proc/self/status"); strings.Fields(out)[1] != "2" {
		t.Errorf("the command runs without a seccomp filter: %q", out)
	}
	for _, script := range []string{
		"unshare -U true",
		"unshare -r true",
		"unshare -Urm mount -t tmpfs x /mnt",
	} {
		if stderr := s.mustFail(t, script); !strings.Contains(stderr, "Operation not permitted") {
			t.Errorf("%q failed, but not with EPERM: %s", script, stderr)
		}
	}
	// mount(8) itself refuses a user that is not root before asking the
	// kernel; the mount call is tried directly in TestSyscallFilterRefusesCalls.
	s.mustFail(t, "mount -t tmpfs x /mnt")
}

// probe is one system call made directly; refused is what the filter must
// answer, "ok" when the call must go through.
type probe struct {
	name    string
	nr      uintptr
	args    string // Python arguments; sib is a sibling process's pid
	refused string
}

func syscallProbes() []probe {
	return []probe{
		{"keyctl", unix.SYS_KEYCTL, "0, -3, 1", "EPERM"}, // KEYCTL_GET_KEYRING_ID of the session keyring
		{"add_key", unix.SYS_ADD_KEY, `b"user", b"atelier-probe", b"x", 1, -2`, "EPERM"},
		{"request_key", unix.SYS_REQUEST_KEY, `b"user", b"atelier-probe", 0, 0`, "EPERM"},
		{"bpf", unix.SYS_BPF, "0, 0, 1 << 20", "EPERM"},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, "0, 0, -1, -1, 0", "EPERM"},
		{"setns", unix.SYS_SETNS, "-1, 0", "EPERM"},
		{"mount", unix.SYS_MOUNT, `b"x", b"/atelier-none", b"tmpfs", 0, 0`, "EPERM"},
		{"umount2", unix.SYS_UMOUNT2, `b"/atelier-none", 0`, "EPERM"},
		{"chroot", unix.SYS_CHROOT, `b"/atelier-none"`, "EPERM"},
		{"open_tree", unix.SYS_OPEN_TREE, `-100, b"/atelier-none", 0`, "EPERM"},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, "1, 0", "EPERM"},
		{"userfaultfd", unix.SYS_USERFAULTFD, "1", "EPERM"}, // UFFD_USER_MODE_ONLY
		{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, `-100, b"/", 0, 0, 0`, "EPERM"},
		{"ptrace_attach", unix.SYS_PTRACE, "16, sib, 0, 0", "EPERM"}, // PTRACE_ATTACH
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, "sib, 0, 0, 0, 0, 0", "EPERM"},
		{"kcmp", unix.SYS_KCMP, "sib, sib, 1, 0, 0", "EPERM"},
		{"personality_no_aslr", unix.SYS_PERSONALITY, "0x0040000", "EPERM"}, // ADDR_NO_RANDOMIZE
		{"personality_query", unix.SYS_PERSONALITY, "0xffffffff", "ok"},
		{"clone_newuser", unix.SYS_CLONE, "0x10000000 | 17, 0, 0, 0, 0", "EPERM"}, // CLONE_NEWUSER, SIGCHLD
		{"clone_plain", unix.SYS_CLONE, "17, 0, 0, 0, 0", "ok"},
		{"clone3", unix.SYS_CLONE3, "0, 0", "ENOSYS"},   // so the C library falls back to clone
		{"unshare_fs", unix.SYS_UNSHARE, "0x200", "ok"}, // CLONE_FS: no namespace
		// Last: a process in a new user namespace may not trace its
		// sibling, which would hide a broken ptrace rule above.
		{"unshare_user", unix.SYS_UNSHARE, "0x10000000", "EPERM"},
	}
}

// probeScript is a bash script that starts a sibling and makes every call
// of probes from python3, printing "name ok" or "name ERRNO" per call.
func probeScript(probes []probe) string {
	var py strings.Builder
	py.WriteString(`import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
sib = int(sys.argv[1])
def probe(name, nr, *args):
    args = [ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *args)
    if r == 0 and name.startswith("clone"):
        os._exit(0)  # the child of a clone that went through
    print(name, "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?"), flush=True)
`)
	for _, p := range probes {
		fmt.Fprintf(&py, "probe(%q, %d, %s)\n", p.name, p.nr, p.args)
	}
	return "sleep 30 & sib=$!; /usr/bin/python3 -c '" + py.String() + "' $sib; kill -KILL $sib"
}

func parseProbes(out string) map[string]string {
	got := map[string]string{}
	for _, l := range lines([]byte(out)) {
		if name, res, ok := strings.Cut(l, " "); ok {
			got[name] = res
		}
	}
	return got
}

// asSessionUser runs script as the session's uid outside the sandbox: no
// filter, but no capability either.
func asSessionUser(t *testing.T, s *session, script string) string {
	t.Helper()
	cmd := exec.Command("/bin/bash", bash(script)[1:]...)
	cmd.Dir, cmd.Env = s.dir, []string{"PATH=/usr/bin:/bin", "HOME=" + s.home}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: s.uid, Gid: s.uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%q as the session's uid: %v", script, err)
	}
	return string(out)
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("precondition: /usr/bin/python3, to make system calls directly")
	}
}

func TestSyscallFilterRefusesCalls(t *testing.T) {
	needPython(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	probes := syscallProbes()
	script := probeScript(probes)
	inside := parseProbes(s.mustRun(t, script))
	outside := parseProbes(asSessionUser(t, s, script))
	for _, p := range probes {
		if got := inside[p.name]; got != p.refused {
			t.Errorf("%s in the sandbox: %q, want %s", p.name, got, p.refused)
		}
		// The control: unfiltered, the kernel does not give the filter's
		// answer, so the filter is what the row above saw.
		if p.refused == "ok" {
			continue
		}
		if got := outside[p.name]; got == "" || got == p.refused {
			t.Logf("%s: the kernel itself answers %q here, so this row does not prove the filter", p.name, got)
		}
	}
}

// A call through another ABI has other numbers and would slip past every
// rule: the filter kills the process instead.
func TestSyscallFilterRefusesForeignABIs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("precondition: amd64, whose i386 and x32 ABIs these calls use")
	}
	needPython(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	for name, py := range map[string]string{
		// getpid through int 0x80, the i386 ABI: mov eax, 20; int 0x80; ret
		"i386": `import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("returned", f())`,
		// getpid with the x32 bit
		"x32": `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("returned", libc.syscall(ctypes.c_long(0x40000000 | 39)), ctypes.get_errno())`,
	} {
		script := "/usr/bin/python3 -c '" + py + "'"
		res, err := s.run(t, script)
		if err != nil {
			t.Fatal(err)
		}
		if res.Signal != unix.SIGSYS.String() || strings.Contains(string(res.Stdout), "returned") {
			t.Errorf("%s call in the sandbox: exit %d %s, stdout %q; want killed by SIGSYS", name, res.ExitCode, res.Signal, res.Stdout)
		}
		if out := asSessionUser(t, s, script+" || true"); !strings.Contains(out, "returned") {
			t.Logf("%s: the call does not return outside the sandbox either (%q), so this case does not prove the filter", name, out)
		}
	}
}

// Ordinary work goes through the filter untouched: shells, git, threads
// (glibc's pthread_create tries clone3 and falls back to clone), Go.
func TestSyscallFilterLetsWorkThrough(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	scripts := map[string]string{
		"ls -d .; cat /etc/hostname >/dev/null; sleep 0.1; echo ok": ".\nok\n",
		`git init -q repo && cd repo && echo x >f && git add f &&
		git -c user.name=a -c user.email=a@example.com commit -qm m && echo y >f && git status --porcelain`: " M f\n",
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		scripts[`/usr/bin/python3 -c '
import threading
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(out) == list(range(8)))'`] = "True\n"
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		scripts["/usr/local/go/bin/go version >/dev/null && echo ok"] = "ok\n"
	}
	for script, want := range scripts {
		if out := s.mustRun(t, script); out != want {
			t.Errorf("%q: %q, want %q", script, out, want)
		}
	}
}
