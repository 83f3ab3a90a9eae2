//go:build linux && (amd64 || arm64)

package injail

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
// control, sockets of other families than local, IP and routing netlink,
// NUMA placement). A refused call fails as it would where the kernel says
// no on its own, so tools take their usual fallback path: EPERM, as for a
// process without the capability, or what a kernel without the feature
// answers (EAFNOSUPPORT for a socket family, ENOSYS for clone3 and NUMA).
//
// Compared with Docker's default profile (moby's
// profiles/seccomp/default.json), an allow list that answers EPERM to
// everything else, these are the calls it refuses a process without
// capabilities, as a command is, and this filter lets through:
//
//   - sethostname, setdomainname: the kernel refuses them without
//     CAP_SYS_ADMIN, and the jail has a UTS namespace of its own anyway;
//     the profile allows them with that capability only.
//   - lsm_get_self_attr, lsm_set_self_attr, lsm_list_modules: the
//     process's own security attributes, which it reads and writes
//     through /proc/self/attr anyway; the profile keeps them for
//     CAP_SYS_ADMIN.
//   - file_getattr, file_setattr, listns, rseq_slice_yield and, on amd64,
//     uprobe: newer than the profile's list rather than refused by a
//     choice of it. They reach no further than calls both allow: a file's
//     attributes as the FS_IOC_FSGETXATTR ioctl has them, the namespaces
//     the caller is in (all listns shows an unprivileged caller), a
//     sched_yield at the end of an extended time slice, and the kernel's
//     own uprobe trampolines (called from anywhere else it ends the
//     process).
//   - afs_syscall, getpmsg, putpmsg, tuxcall, security, vserver (amd64):
//     never implemented; the kernel answers ENOSYS.
//
// The profile's socket rule refuses AF_ALG and AF_VSOCK alone; this one
// allows four families and refuses the rest. It refuses the NUMA calls
// without CAP_SYS_NICE (migrate_pages and move_pages always), and so does
// this filter. The other way round, this filter refuses what the profile
// allows: io_uring, name_to_handle_at, ptrace and process_vm_readv and
// writev (see the tracing rule below), and a call of a foreign ABI, which
// the profile judges by the same list.
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

// socketFamilies are the address families a command may open sockets of,
// with socket and socketpair alike: local sockets, IPv4, IPv6, and
// netlink for its routing protocol alone (netlinkProtocols). Every other
// family answers EAFNOSUPPORT, what a kernel built without it answers, so
// tools take the path they take there. AF_VSOCK is the one that matters
// most: its ports belong to the machine, not to the network namespace,
// so a command could take a port from the host's own services or talk to
// the hypervisor. The rest (AF_ALG, AF_PACKET, AF_TIPC, AF_RDS,
// Bluetooth, CAN, ...) are kernel surface a build never needs, and asking
// for one the kernel has not loaded loads its module: many local
// privilege escalations began with exactly such a socket.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// netlinkProtocols narrows AF_NETLINK to NETLINK_ROUTE, which ordinary
// tools need to learn the namespace's own addresses and links: the C
// library's getaddrinfo (AI_ADDRCONFIG), getifaddrs and if_nameindex,
// and through them Node's os.networkInterfaces(), Python's
// socket.if_nameindex(), Go's net.Interfaces and `ip addr`. Without
// CAP_NET_ADMIN it changes nothing, and it sees the command's own network
// namespace only. The other protocols (the whole machine's device events,
// audit, netfilter, xfrm, generic netlink's families, socket diagnostics)
// answer EPROTONOSUPPORT, as for a protocol the kernel lacks; `ss` then
// reads /proc/net, as it does there.
var netlinkProtocols = argTest{arg: 2, values: []uint32{unix.NETLINK_ROUTE}, errno: unix.EPROTONOSUPPORT}

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
	// then narrows argValues: a value it names goes through only when
	// a second argument passes that value's own test.
	then map[uint32]argTest
}

// argTest lets a call through when argument arg is one of values, and
// refuses it with errno otherwise.
type argTest struct {
	arg    int
	values []uint32
	errno  unix.Errno
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
		{nr: unix.SYS_SOCKET, errno: unix.EAFNOSUPPORT, arg: 0, argValues: socketFamilies,
			then: map[uint32]argTest{unix.AF_NETLINK: netlinkProtocols}},
		{nr: unix.SYS_SOCKETPAIR, errno: unix.EAFNOSUPPORT, arg: 0, argValues: socketFamilies,
			then: map[uint32]argTest{unix.AF_NETLINK: netlinkProtocols}},
	}
	// Memory placement on NUMA nodes: where a command's memory lives is
	// the host's choice (a command that binds its memory to one node
	// crowds everyone else out of it), and move_pages and migrate_pages
	// read where another process's pages are and move them, for any
	// process of the uid, which the ptrace rule below keeps out of reach.
	// They answer ENOSYS, what a kernel without NUMA answers: libnuma's
	// numa_available() then says there is no NUMA and programs never call
	// the rest. (Before 2.0.19, still shipped by current distributions,
	// libnuma takes only ENOSYS for that; after EPERM it goes on and fails
	// later.)
	for _, nr := range []uintptr{unix.SYS_GET_MEMPOLICY, unix.SYS_SET_MEMPOLICY, unix.SYS_SET_MEMPOLICY_HOME_NODE,
		unix.SYS_MBIND, unix.SYS_MIGRATE_PAGES, unix.SYS_MOVE_PAGES} {
		rules = append(rules, syscallRule{nr: nr, errno: unix.ENOSYS})
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
	kill := bpfRet(unix.SECCOMP_RET_KILL_PROCESS)
	prog := []unix.SockFilter{
		bpfLoad(seccompArch),
		bpfJump(unix.BPF_JEQ, seccompAuditArch, 1, 0),
		kill,
		bpfLoad(seccompNr),
	}
	if seccompX32 {
		// x32 calls carry the same audit arch, with bit 30 set in the
		// number.
		prog = append(prog, bpfJump(unix.BPF_JGE, x32SyscallBit, 0, 1), kill)
	}
	for _, r := range syscallRules() {
		var body []unix.SockFilter
		switch {
		case r.argBits != 0:
			body = []unix.SockFilter{
				bpfLoad(seccompArg0 + 8*uint32(r.arg)),
				bpfJump(unix.BPF_JSET, r.argBits, 0, 1),
				refuseWith(r.errno),
				bpfAllow,
			}
		case r.argValues != nil:
			body = oneOf(argTest{arg: r.arg, values: r.argValues, errno: r.errno}, r.then)
		default:
			body = []unix.SockFilter{refuseWith(r.errno)}
		}
		prog = append(prog, bpfJump(unix.BPF_JEQ, uint32(r.nr), 0, uint8(len(body))))
		prog = append(prog, body...)
	}
	return append(prog, bpfAllow)
}

// oneOf is the block of a test: the load of its argument, a comparison
// per value, the refusal and "allow", then the block of each value's
// further test in then, in the order of the values. Every path through
// it ends in a return.
func oneOf(t argTest, then map[uint32]argTest) []unix.SockFilter {
	n := len(t.values)
	var further []unix.SockFilter
	body := []unix.SockFilter{bpfLoad(seccompArg0 + 8*uint32(t.arg))}
	for i, v := range t.values {
		// Past the comparisons left and the refusal: "allow".
		skip := n - i
		if next, ok := then[v]; ok {
			// Past "allow" too, to where this value's test begins.
			skip += 1 + len(further)
			further = append(further, oneOf(next, nil)...)
		}
		body = append(body, bpfJump(unix.BPF_JEQ, v, uint8(skip), 0))
	}
	body = append(body, refuseWith(t.errno), bpfAllow)
	return append(body, further...)
}

func bpfRet(v uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: v} }

var bpfAllow = bpfRet(unix.SECCOMP_RET_ALLOW)

func refuseWith(errno unix.Errno) unix.SockFilter {
	return bpfRet(unix.SECCOMP_RET_ERRNO | uint32(errno))
}

func bpfLoad(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}

func bpfJump(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k, Jt: jt, Jf: jf}
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
