package injail

import "golang.org/x/sys/unix"

// seccompAuditArch is the only architecture the filter lets through: an
// i386 call (int 0x80) kills the process, since its numbers differ and
// would slip past every rule.
const seccompAuditArch = unix.AUDIT_ARCH_X86_64

// seccompX32 says the x32 ABI shares this audit arch and must be refused
// by its syscall-number bit.
const seccompX32 = true

// archRules refuses the calls only amd64 has: port I/O, old module and
// sysctl interfaces, and loading a.out libraries. (vm86 exists on i386
// only, refused with it by the architecture check.)
func archRules() []syscallRule {
	return deny(unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS_CREATE_MODULE,
		unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE, unix.SYS__SYSCTL, unix.SYS_USTAT, unix.SYS_SYSFS)
}
