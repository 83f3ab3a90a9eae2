//go:build linux && (amd64 || arm64)

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system call filter every command runs under, modelled on the
// default profile of container runtimes: everything is allowed except the
// calls that reach kernel surface a build or a shell never needs and that
// unprivileged attacks go through (new user namespaces, mounts, keyrings,
// eBPF, perf, tracing other processes, io_uring, module and clock
// control). Refused calls fail with EPERM, as they would for a process
// without the capability, so tools take their usual fallback path.
//
// The program is written out by hand rather than with go-seccomp-bpf: that
// library sends a call of a foreign architecture (an int 0x80 call of the
// i386 ABI on amd64, an AArch32 call on arm64) to the policy's default
// action, which for a deny list is "allow", so every rule below could be
// bypassed by switching ABI. Here a foreign architecture, and the x32 ABI
// on amd64, kill the process.

// The layout of struct seccomp_data. Arguments are 64 bits wide; the
// rules look at their low 32 bits only (at offset +0 on the little-endian
// architectures this file builds for), which is where every flag they
// check lives and all the kernel reads of the calls they check.
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16

	x32SyscallBit = 0x40000000 // __X32_SYSCALL_BIT of the x86 headers
)

// namespaceFlags are the clone and unshare flags that create a namespace.
// CLONE_NEWTIME only means that to unshare: in clone's flags that bit is
// part of the exit signal.
const (
	namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareFlags = namespaceFlags | unix.CLONE_NEWTIME
)

// personalities are the persona values a command may set, as in container
// runtimes' default profile: Linux, Linux with a 2.6-style uname, their
// 32-bit forms, and 0xffffffff, which only reads the current one. The rest
// (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, foreign personae) weaken the
// process's memory protections.
var personalities = []uint32{0, uname26, perLinux32, perLinux32 | uname26, 0xffffffff}

// From linux/personality.h, which x/sys/unix does not carry.
const (
	uname26    = 0x0020000
	perLinux32 = 0x0000008
)

// syscallRule says what happens to one system call. Each call has at most
// one rule, so a rule's answer is final.
type syscallRule struct {
	nr    uintptr
	errno unix.Errno // returned when refused
	// arg, when the rule looks at an argument: refuse when any of
	// argBits is set in it, or when it is none of argValues.
	arg       int
	argBits   uint32
	argValues []uint32
}

func deny(nrs ...uintptr) []syscallRule {
	rules := make([]syscallRule, len(nrs))
	for i, nr := range nrs {
		rules[i] = syscallRule{nr: nr, errno: unix.EPERM}
	}
	return rules
}

// syscallRules is the whole deny list: the calls common to amd64 and arm64
// and those only one of them has (archRules).
func syscallRules() []syscallRule {
	rules := []syscallRule{
		// New namespaces: a user namespace gives a process every capability
		// over what it creates and a kernel attack surface (mounting
		// filesystems, netfilter) meant for root alone.
		{nr: unix.SYS_UNSHARE, errno: unix.EPERM, arg: 0, argBits: unshareFlags},
		{nr: unix.SYS_CLONE, errno: unix.EPERM, arg: 0, argBits: namespaceFlags},
		// clone3 takes its flags in a struct the filter cannot read. ENOSYS
		// makes the C library (pthread_create, posix_spawn) fall back to
		// clone, whose flags it can.
		{nr: unix.SYS_CLONE3, errno: unix.ENOSYS},
		{nr: unix.SYS_PERSONALITY, errno: unix.EPERM, arg: 0, argValues: personalities},
	}
	rules = append(rules, deny(
		unix.SYS_SETNS,
		// Mounts, old and new API.
		unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
		unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_OPEN_TREE_ATTR, unix.SYS_MOUNT_SETATTR,
		unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
		// Kernel keyrings are not namespaced: keys outlive the command and
		// are shared by the uid.
		unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
		// In-kernel programs, profiling and io_uring: large attack surface,
		// the source of many local privilege escalations.
		unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
		unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
		// Reading or changing another process. A filter cannot tell the
		// caller's own child from a sibling (the session's terminals run as
		// the same uid), so ptrace is refused outright: strace and gdb do
		// not work in the sandbox.
		unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
		unix.SYS_PROCESS_MADVISE, unix.SYS_PIDFD_GETFD, unix.SYS_KCMP,
		// Files by handle bypass the path walk and its permission checks.
		unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
		// The machine's own controls: kernels, modules, reboot, swap,
		// accounting, clocks, the kernel log, quotas, fanotify.
		unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
		unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
		unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
		unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
		unix.SYS_SYSLOG, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_LOOKUP_DCOOKIE,
		unix.SYS_FANOTIFY_INIT, unix.SYS_NFSSERVCTL, unix.SYS_VHANGUP,
	)...)
	return append(rules, archRules()...)
}

// seccompProgram assembles the filter: the architecture check, then one
// block per rule, then "allow".
func seccompProgram() []unix.SockFilter {
	ret := func(v uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: v} }
	load := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jump := func(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	kill := ret(unix.SECCOMP_RET_KILL_PROCESS)
	allow := ret(unix.SECCOMP_RET_ALLOW)

	prog := []unix.SockFilter{
		load(seccompArch),
		jump(unix.BPF_JEQ, seccompAuditArch, 1, 0),
		kill,
		load(seccompNr),
	}
	if seccompX32 {
		// x32 calls carry the same audit arch, with bit 30 set in the
		// number.
		prog = append(prog, jump(unix.BPF_JGE, x32SyscallBit, 0, 1), kill)
	}
	for _, r := range syscallRules() {
		refuse := ret(unix.SECCOMP_RET_ERRNO | uint32(r.errno))
		var body []unix.SockFilter
		switch {
		case r.argBits != 0:
			body = []unix.SockFilter{
				load(seccompArg0 + 8*uint32(r.arg)),
				jump(unix.BPF_JSET, r.argBits, 0, 1),
				refuse,
				allow,
			}
		case r.argValues != nil:
			body = []unix.SockFilter{load(seccompArg0 + 8*uint32(r.arg))}
			for i, v := range r.argValues {
				// Jump over the remaining comparisons and the refusal.
				body = append(body, jump(unix.BPF_JEQ, v, uint8(len(r.argValues)-i), 0))
			}
			body = append(body, refuse, allow)
		default:
			body = []unix.SockFilter{refuse}
		}
		prog = append(prog, jump(unix.BPF_JEQ, uint32(r.nr), 0, uint8(len(body))))
		prog = append(prog, body...)
	}
	return append(prog, allow)
}

// installSeccomp puts the filter on the calling thread, which execve then
// hands to the command and it to every process it starts. It needs
// no_new_privs (or CAP_SYS_ADMIN) and so comes after it.
func installSeccomp() error {
	prog := seccompProgram()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("sandbox: install the system call filter: %w", errno)
	}
	return nil
}
