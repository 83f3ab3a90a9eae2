//go:build linux

package sandbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
	"atelier/testrig/wait"
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
		// NUMA placement answers as on a kernel without NUMA.
		{"get_mempolicy", unix.SYS_GET_MEMPOLICY, "0, 0, 0, 0, 0", "ENOSYS"},
		{"set_mempolicy", unix.SYS_SET_MEMPOLICY, "0, 0, 0", "ENOSYS"}, // MPOL_DEFAULT
		{"set_mempolicy_home_node", unix.SYS_SET_MEMPOLICY_HOME_NODE, "0, 4096, 0, 0", "ENOSYS"},
		{"mbind", unix.SYS_MBIND, "0, 0, 0, 0, 0, 0", "ENOSYS"},
		{"move_pages_self", unix.SYS_MOVE_PAGES, "0, 0, 0, 0, 0, 0", "ENOSYS"},
		{"move_pages_sibling", unix.SYS_MOVE_PAGES, "sib, 0, 0, 0, 0, 0", "ENOSYS"},
		{"migrate_pages", unix.SYS_MIGRATE_PAGES, "sib, 0, 0, 0", "ENOSYS"},
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
// rule: the filter kills the process instead, for each ABI the host's
// kernel runs at all.
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
		// A kernel built or booted without this ABI (ia32_emulation=0)
		// faults the call before any filter sees it: there is nothing to
		// refuse, and the case proves nothing about the filter.
		if out := asSessionUser(t, s, script+" || true"); !strings.Contains(out, "returned") {
			t.Logf("%s: this host's kernel does not run the call even outside the sandbox (%q); the case is left out", name, out)
			continue
		}
		res, err := s.run(t, script)
		if err != nil {
			t.Fatal(err)
		}
		if res.Signal != unix.SIGSYS.String() || strings.Contains(string(res.Stdout), "returned") {
			t.Errorf("%s call in the sandbox: exit %d %s, stdout %q; want killed by SIGSYS", name, res.ExitCode, res.Signal, res.Stdout)
		}
	}
}

// Ordinary work goes through the filter untouched: shells, git, threads
// (glibc's pthread_create tries clone3 and falls back to clone), the
// network interfaces' names, Go.
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
		// Routing netlink, which the C library's if_nameindex asks.
		scripts[`/usr/bin/python3 -c 'import socket; print(socket.if_nameindex())'`] = "[(1, 'lo')]\n"
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

// sockRow is one address family (with a type and protocol it takes) and
// what socket and socketpair of it must answer in the sandbox.
type sockRow struct {
	name               string
	family, typ, proto int
	socket, pair       string // "ok" or the errno's name
}

// socketRows are the families a command may open and, by name, those
// the filter refuses, then every other family number up to 63. The
// kernel answers socketpair of the allowed families but AF_UNIX itself
// (EOPNOTSUPP, which python names ENOTSUP): the filter lets those through
// to it.
func socketRows() []sockRow {
	const refused = "EAFNOSUPPORT"
	rows := []sockRow{
		{"unix", unix.AF_UNIX, unix.SOCK_STREAM, 0, "ok", "ok"},
		{"unix_dgram", unix.AF_UNIX, unix.SOCK_DGRAM, 0, "ok", "ok"},
		{"inet", unix.AF_INET, unix.SOCK_STREAM, 0, "ok", "ENOTSUP"},
		{"inet_dgram", unix.AF_INET, unix.SOCK_DGRAM, 0, "ok", "ENOTSUP"},
		{"inet6", unix.AF_INET6, unix.SOCK_STREAM, 0, "ok", "ENOTSUP"},
		{"netlink_route", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, "ok", "ENOTSUP"},
		{"netlink_route_dgram", unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_ROUTE, "ok", "ENOTSUP"},
		// Netlink's other protocols answer as a kernel without them.
		{"netlink_sock_diag", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG, "EPROTONOSUPPORT", "EPROTONOSUPPORT"},
		{"netlink_uevent", unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT, "EPROTONOSUPPORT", "EPROTONOSUPPORT"},
		{"netlink_audit", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT, "EPROTONOSUPPORT", "EPROTONOSUPPORT"},
		{"netlink_generic", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC, "EPROTONOSUPPORT", "EPROTONOSUPPORT"},
		{"netlink_netfilter", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, "EPROTONOSUPPORT", "EPROTONOSUPPORT"},
		{"netlink_xfrm", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM, "EPROTONOSUPPORT", "EPROTONOSUPPORT"},
		{"vsock", unix.AF_VSOCK, unix.SOCK_STREAM, 0, refused, refused},
		{"vsock_dgram", unix.AF_VSOCK, unix.SOCK_DGRAM, 0, refused, refused},
		{"packet", unix.AF_PACKET, unix.SOCK_RAW, 0x0300, refused, refused}, // ETH_P_ALL, network order
		{"alg", unix.AF_ALG, unix.SOCK_SEQPACKET, 0, refused, refused},
		{"key", unix.AF_KEY, unix.SOCK_RAW, 2, refused, refused}, // PF_KEY_V2
		{"bluetooth", unix.AF_BLUETOOTH, unix.SOCK_SEQPACKET, 0, refused, refused},
		{"xdp", unix.AF_XDP, unix.SOCK_RAW, 0, refused, refused},
		{"can", unix.AF_CAN, unix.SOCK_RAW, 1, refused, refused}, // CAN_RAW
		{"tipc", unix.AF_TIPC, unix.SOCK_RDM, 0, refused, refused},
		{"rds", unix.AF_RDS, unix.SOCK_SEQPACKET, 0, refused, refused},
		{"pppox", unix.AF_PPPOX, unix.SOCK_STREAM, 0, refused, refused},
		{"llc", unix.AF_LLC, unix.SOCK_DGRAM, 0, refused, refused},
		{"qipcrtr", unix.AF_QIPCRTR, unix.SOCK_DGRAM, 0, refused, refused},
		{"smc", unix.AF_SMC, unix.SOCK_STREAM, 0, refused, refused},
		{"kcm", unix.AF_KCM, unix.SOCK_DGRAM, 0, refused, refused},
		{"mctp", unix.AF_MCTP, unix.SOCK_DGRAM, 0, refused, refused},
		{"beyond_af_max", 1 << 16, unix.SOCK_STREAM, 0, refused, refused},
	}
	named := map[int]bool{}
	for _, r := range rows {
		named[r.family] = true
	}
	for f := 0; f < 64; f++ {
		if !named[f] {
			rows = append(rows, sockRow{fmt.Sprintf("family_%d", f), f, unix.SOCK_DGRAM, 0, refused, refused})
		}
	}
	return rows
}

// socketScript is a python3 script that opens a socket and a socket pair
// of each row, printing "name socket-answer pair-answer" per row.
func socketScript(rows []sockRow) string {
	var py strings.Builder
	py.WriteString(`import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def answer(r):
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def probe(name, family, typ, proto):
    ctypes.set_errno(0)
    fd = libc.socket(family, typ, proto)
    one = answer(fd)
    if fd >= 0: libc.close(fd)
    sv = (ctypes.c_int * 2)()
    ctypes.set_errno(0)
    r = libc.socketpair(family, typ, proto, sv)
    pair = answer(r)
    if r == 0: libc.close(sv[0]); libc.close(sv[1])
    print(name, one, pair, flush=True)
`)
	for _, r := range rows {
		fmt.Fprintf(&py, "probe(%q, %d, %d, %d)\n", r.name, r.family, r.typ, r.proto)
	}
	return "/usr/bin/python3 -c '" + py.String() + "'"
}

// Every family but local, IP and routing netlink is refused, as by a
// kernel without it; the same script as the session's uid outside the
// sandbox shows which refusals are the filter's own.
func TestSyscallFilterSocketFamilies(t *testing.T) {
	needPython(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	rows := socketRows()
	script := socketScript(rows)
	inside := parseProbes(s.mustRun(t, script))
	outside := parseProbes(asSessionUser(t, s, script))
	var kernels []string
	for _, r := range rows {
		want := r.socket + " " + r.pair
		if got := inside[r.name]; got != want {
			t.Errorf("%s (family %d, protocol %d) in the sandbox: socket, socketpair %q, want %q", r.name, r.family, r.proto, got, want)
		}
		if r.socket != "ok" && outside[r.name] == want {
			kernels = append(kernels, r.name)
		}
	}
	t.Logf("the kernel itself refuses these as the filter does, so their rows do not prove it: %s", strings.Join(kernels, " "))
}

// vsock ports are the machine's, whatever the network namespace: a
// command that could bind one would take it from the host's services.
// The command tries to bind and hold a port; the host must then still be
// able to bind it.
func TestSandboxCannotTakeAVsockPort(t *testing.T) {
	needPython(t)
	probe, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("precondition: AF_VSOCK on this host, whose port the sandbox must not take: %v", err)
	}
	unix.Close(probe)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	port := uint32(1<<30 + rand.N(1<<29))
	script := fmt.Sprintf(`/usr/bin/python3 -c '
import errno, os, socket, time
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.bind((socket.VMADDR_CID_ANY, %d))
    s.listen()
    res = "bound"
except OSError as e:
    res = errno.errorcode.get(e.errno, "?")
open("vsock.tmp", "w").write(res)
os.rename("vsock.tmp", "vsock")
if res == "bound":
    time.sleep(20)
'`, port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sb.Run(ctx, s.spec(script), sandbox.Limits{Timeout: 30 * time.Second})
		done <- err
	}()
	defer func() {
		cancel()
		<-done
	}()
	result := filepath.Join(s.dir, "vsock")
	var res []byte
	if !wait.Until(wait.Long, func() bool {
		res, err = os.ReadFile(result)
		return err == nil
	}) {
		t.Fatalf("the command did not report: %v", err)
	}
	if string(res) != "EAFNOSUPPORT" {
		t.Errorf("vsock socket in the sandbox: %q, want EAFNOSUPPORT", res)
	}
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		t.Fatalf("the host cannot bind vsock port %d while the sandbox runs: %v", port, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
}
