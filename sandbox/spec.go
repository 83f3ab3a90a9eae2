package sandbox

import (
	"errors"
	"io"
	"log/slog"
	"os"
)

// Network is a command's network policy.
type Network string

// Network policies. The empty Network is Deny.
const (
	Deny  Network = "deny"  // a network namespace of its own with only loopback, up
	Allow Network = "allow" // the host's network
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
	Argv      []string // e.g. {"/bin/bash", "--noprofile", "--norc", "-c", cmd}; a bare name is found on the clean PATH
	ExtraEnv  []string // normally empty; only TERM=... is accepted (for shells)
	Network   Network
	Stdin     io.Reader // Run only; nil = /dev/null
	// TTY is a PTY slave for Start: it becomes stdin, stdout and stderr and
	// the controlling terminal of a new session. The caller owns the PTY.
	TTY *os.File
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
	// ROPaths are the host's folders a command sees, read-only, at the
	// same place (ATELIER_SANDBOX_RO_PATHS); nil means DefaultROPaths.
	// Those missing on the host are left out; a symbolic link among them
	// (/bin -> usr/bin) is made again inside.
	ROPaths []string
	// Path is added to the PATH inside (ATELIER_SANDBOX_PATH), after the
	// usual folders and /usr/local/go/bin when the host has Go there.
	Path []string
	Log  *slog.Logger
}

// Defaults of Config.
const (
	DefaultUIDBase   = 3_000_000_000
	DefaultUIDCount  = 1_000_000
	DefaultMaxProcs  = 256
	DefaultMaxMemory = 2 << 30
)

// Errors of the sandbox beyond RunError's kinds.
var (
	// ErrNetworkUnenforceable: a command asked for Deny, and no network
	// namespace could be made. The command does not run.
	ErrNetworkUnenforceable = errors.New("sandbox: network deny cannot be enforced here")
	ErrBadSpec              = errors.New("sandbox: bad command spec")
	ErrBadConfig            = errors.New("sandbox: bad config")
	// ErrInitMissing: New was called in a program whose main did not call
	// Init first.
	ErrInitMissing   = errors.New("sandbox: sandbox.Init was not called at the start of main")
	ErrNotRoot       = errors.New("sandbox: the server must run as root to sandbox commands")
	ErrProcessesLeft = errors.New("sandbox: processes survived the kill")
	ErrSymlink       = errors.New("sandbox: a symbolic link is in the way")
	// ErrUnavailable: the kernel lacks something the jail needs (a kind
	// of namespace, pivot_root, a file system type). New logs which; no
	// command runs.
	ErrUnavailable = errors.New("sandbox: this host cannot build the sandbox's jail")
)
