package sandbox

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"atelier/fault"
)

// Network is a command's network policy.
type Network string

// Network policies. The empty Network is Deny.
const (
	Deny  Network = "deny"  // a network namespace of its own with only loopback, up
	Allow Network = "allow" // the internet, not the host (egress_linux.go)
)

// Spec is one sandboxed process.
type Spec struct {
	// UID and GID are unique to the session and lie in the configured
	// range (Config.UIDBase, Config.UIDCount).
	UID, GID uint32
	// Workspace is the session's checkout on the host, seen read-write
	// at /workspace; "" means Dir. Dir is the working directory, Workspace
	// or a folder below it (/workspace/<folder> inside).
	Workspace string
	Dir       string
	// Home and Tmp are the session's folders on the host, seen at
	// /home/atelier (HOME) and /tmp; they last as long as the session. Tmp
	// "" gives each command a small /tmp of its own in memory.
	Home, Tmp string
	Argv      []string // e.g. CommandArgv(cmd) or ShellArgv(); a bare name is found on the clean PATH
	ExtraEnv  []string // normally empty; only TERM=... is accepted, in place of the TTY's or a command's
	Network   Network
	Stdin     io.Reader // Run only; nil = /dev/null
	// Output, for Run, is given stdout and stderr as they are read, the
	// two interleaved in the order their reads return, besides the
	// Result's tails (which keep them apart). Writes come one at a time
	// and hold the pipes while they run, so it must not block.
	Output io.Writer
	// TTY is a PTY slave for Start: it becomes stdin, stdout and stderr and
	// the controlling terminal of a new session. The caller owns the PTY.
	TTY *os.File
	// Spare is a helper started ahead for this command (Sandbox.Spare),
	// or nil. Run takes it: it runs the command in it when it can, and
	// ends it otherwise (a Stdin, or Network Allow, needs a fresh one).
	Spare *Spare
	// Started, for Run, is called once the command has started, before
	// it is waited for; it must not block.
	Started func()
	// Cache is the project's cache on the host, seen read-write at
	// HOME/.cache, where the environment points the usual tools' caches
	// (cacheEnv); "" leaves HOME's own .cache, as new as HOME is.
	Cache string
}

// CommandArgv runs command, a line of shell, as a one-shot command or a
// check: bash reads no start-up file, so the command gets exactly the
// sandbox's environment.
func CommandArgv(command string) []string {
	return []string{"/bin/bash", "--noprofile", "--norc", "-c", command}
}

// ShellArgv starts a terminal's shell: an interactive bash (its prompt,
// job control, the session's own ~/.bashrc) that is not a login shell. A
// login shell would read the host's /etc/profile, whose job is to set
// PATH, and the shell would lose the PATH every command has (Go's
// toolchain, Config.Path).
func ShellArgv() []string {
	return []string{"/bin/bash", "-i"}
}

// Config is the sandbox's set-up, loaded once.
type Config struct {
	// Sessions' uids and gids come from [UIDBase, UIDBase+UIDCount). The
	// range must avoid real accounts and the usual subordinate id ranges
	// of /etc/subuid and /etc/subgid. Zero for both means 3_000_000_000
	// and 1_000_000.
	UIDBase, UIDCount uint32
	MaxProcs          int   // processes and threads of one uid; default 256
	MaxMemory         int64 // bytes; default 2 GiB
	// CgroupRoot is where cgroup file systems are mounted, e.g.
	// /sys/fs/cgroup. "" looks for a writable hierarchy with the memory and
	// pids controllers and falls back to rlimits only when there is none;
	// "-" uses rlimits only. A named root that cannot be used is an error.
	// Each uid gets the group atelier-sandbox/u<uid> at the top of the
	// memory and pids hierarchies (v1) or of the unified one (v2), made
	// before its command starts and removed by KillAll.
	CgroupRoot string
	// CgroupParent names the group holding every uid's group, in each
	// hierarchy; "" is atelier-sandbox. Its limits bound all sandboxes
	// together (limits_linux.go).
	CgroupParent string
	// MaxMemoryTotal bounds the memory of all sandboxes together, in
	// bytes, on the parent group (ATELIER_SANDBOX_MEMORY_TOTAL); 0 is half
	// the host's memory. Without cgroups it does nothing.
	MaxMemoryTotal int64
	// AllowNetworks are networks that Network Allow may reach although
	// netblock refuses them: private, link-local, reserved, the host's own
	// addresses or networks (ATELIER_SANDBOX_ALLOW_CIDRS). Loopback stays
	// out of reach.
	AllowNetworks []netip.Prefix
	// NetStack is the slirp4netns that Network Allow needs; "" looks on
	// PATH and in /usr/bin. Without it, Allow is refused.
	NetStack string
	// ROPaths are the host's folders a command sees, read-only, at the
	// same place (ATELIER_SANDBOX_RO_PATHS); nil means DefaultROPaths.
	// Those missing on the host are left out; a symbolic link among them
	// (/bin -> usr/bin) is made again inside.
	ROPaths []string
	// Path is added to the PATH inside (ATELIER_SANDBOX_PATH), after the
	// usual folders and /usr/local/go/bin when the host has Go there.
	Path []string
	// ResolvConf is the host's resolv.conf, a file or a symbolic link
	// (into /run/systemd/resolve/, say); "" is /etc/resolv.conf. Its name
	// servers not on loopback are those an allowed command may ask, and a
	// command finds its own resolv.conf at /etc/resolv.conf and, when this
	// is a link, where the link leads inside (read as if it stood at
	// /etc/resolv.conf).
	ResolvConf string
	// Helper is the program each command's init helper runs: "" is this
	// very binary (/proc/self/exe), as a server always has it. Tests built
	// with the race detector name a plain build of the server, whose start
	// costs a tenth of theirs. It must be root's and writable by root
	// alone; New opens it once, so a later swap of the file changes
	// nothing.
	Helper string
	Log    *slog.Logger
}

// Defaults of Config.
const (
	DefaultUIDBase   = 3_000_000_000
	DefaultUIDCount  = 1_000_000
	DefaultMaxProcs  = 256
	DefaultMaxMemory = 2 << 30
	// MinDiskBytes is the smallest session disk (MountDisk): ext4's own
	// metadata must fit.
	MinDiskBytes = 16 << 20
)

// Errors of the sandbox beyond RunError's kinds.
var (
	// ErrNetworkUnenforceable: a command asked for Deny, and no network
	// namespace could be made. The command does not run.
	ErrNetworkUnenforceable = fault.New(fault.Unavailable, "network_unenforceable", "sandbox: network deny cannot be enforced here", "The server cannot cut this project's sandbox off the network here, so it does not run commands; an administrator can allow the network for the project or give the server CAP_SYS_ADMIN.")
	// ErrNetworkUnavailable: a command asked for Allow, and its namespace with
	// the user-mode network stack could not be made (slirp4netns or unshare
	// missing, /dev/net/tun closed, no user or network namespaces, no
	// nftables). The command does not run; it never gets the host's network
	// instead.
	ErrNetworkUnavailable = fault.New(fault.Unavailable, "network_unavailable", "sandbox: network allow is unavailable here",
		"The server cannot give this project's sandbox the internet without the host here (slirp4netns and /dev/net/tun are needed), so it does not run commands with the network allowed; the log at start says what is missing, and an administrator can install it or deny the network for the project.")
	ErrBadSpec       = errors.New("sandbox: bad command spec")
	ErrBadConfig     = errors.New("sandbox: bad config")
	ErrNotRoot       = errors.New("sandbox: the server must run as root to sandbox commands")
	ErrProcessesLeft = errors.New("sandbox: processes survived the kill")
	ErrSymlink       = errors.New("sandbox: a symbolic link is in the way")
	// ErrDisk: a session's disk could not be made, mounted or removed.
	ErrDisk = errors.New("sandbox: session disk")
	// ErrUnavailable: the kernel lacks something the jail needs (a kind
	// of namespace, pivot_root, a file system type). New logs which; no
	// command runs.
	ErrUnavailable = fault.New(fault.Unavailable, "sandbox_unavailable", "sandbox: this host cannot build the sandbox's jail",
		"This server's host lacks a kernel feature the sandbox needs, so commands and terminals are off; the server's log at start says which.")
)
