// Package injail is the sandbox's helper: this binary started again by
// package sandbox, as root and PID 1 of fresh namespaces, to build the
// jail, drop to the session's user and start the command, then stay as
// its reaper. What passes between the two sides (the environment marker,
// the descriptors, the Spec and the Replies) is defined here.
//
// The helper runs from this package's init and exits there, never reaching
// main. Go initializes a package as soon as all it imports is, taking the
// ready ones in import-path order, so a package that imports only the
// standard library and golang.org/x/sys runs before the rest of the
// binary's set-up: the syntax highlighter's lexers and styles alone take
// 20 ms of the 40 a helper otherwise spends before reading a word of its
// instructions. Keep it so (TestTheHelperStartsAheadOfTheServer in the
// binary's own tests fails otherwise): nothing here may import a package
// outside those two.
package injail

import "time"

// The helper's environment and descriptors.
const (
	// Env marks the helper: its only variable, set to "1".
	Env = "ATELIER_SANDBOX_INIT"
	// Arg0 is its argv[0], for ps.
	Arg0 = "atelier-sandbox-init"
	// SpareArg is a spare helper's argv[1]: its stdout and stderr come
	// over the socket, ahead of the Spec. The arguments after it are the
	// cgroup.procs files it joins before it sends SpareReady.
	SpareArg = "spare"
	// SpareReady is the byte a spare helper sends once it is in its
	// uid's cgroups; anything else, or nothing, means it will not run a
	// command.
	SpareReady = 'r'
	// FD is the socket to the server.
	FD = 3
	// NetnsFD is the network namespace an Allow command joins.
	NetnsFD = FD + 1
	// ExitStart is the helper's exit code when it fails.
	ExitStart = 127
)

// SpareWait is how long a spare helper waits for its command, then exits:
// the copy of the server's mounts it holds keeps file systems of ended
// sessions (their disks) from going, so it must not hold it for long.
const SpareWait = 20 * time.Second

// Stages the helper reports a failure at (Reply.Stage).
const (
	StageSpec      = "spec"
	StageCgroup    = "cgroup"
	StageLimits    = "rlimits"
	StageJail      = "jail" // building the new root: the kernel lacks something
	StageJoinNetns = "netns-join"
	StageNetns     = "netns"
	StageLo        = "loopback"
	StageCaps      = "capabilities"
	StageIDs       = "uid/gid"
	StageVerify    = "verify"
	StageDir       = "chdir"
	StageSeccomp   = "seccomp"
	StageExec      = "exec"
)

// Where things are inside the jail.
const (
	Workspace = "/workspace"
	Home      = "/home/atelier"
	Cache     = Home + "/.cache" // where Spec.Cache is seen
	// HostResolvConf is where the host keeps its resolv.conf, and where a
	// command looks for its own.
	HostResolvConf = "/etc/resolv.conf"
)

// PrlimitPath is util-linux's prlimit, which sets a command's RLIMIT_DATA
// when no memory cgroup bounds it (Spec.MaxData).
const PrlimitPath = "/usr/bin/prlimit"

// Spec is what the server tells the helper, as JSON over FD.
type Spec struct {
	UID, GID    uint32
	Dir         string // inside the jail: /workspace or below
	Argv        []string
	Env         []string
	DenyNetwork bool
	JoinNetns   bool // Allow: join the namespace at NetnsFD
	MaxProcs    uint64
	MaxData     uint64   // RLIMIT_DATA; 0 leaves it (a memory cgroup limits instead)
	Cgroups     []string // cgroup.procs files to join
	// Host folders: the checkout, HOME and /tmp ("" is a tmpfs) of the
	// session, and what is seen read-only.
	Workspace, Home, Tmp string
	ROPaths              []string
	Cache                string // bound at HOME/.cache; "" leaves HOME's own
	// ResolvConf is the command's resolv.conf, placed at /etc/resolv.conf
	// and at ResolvAt, where the host's link leads ("" when it is a file).
	ResolvConf, ResolvAt string
	TTY                  bool // stdin is a terminal to make the controlling one
	Probe                bool // build the jail, then exit: the server's check
}

// Reply is the helper's report: a failure before the command started
// (Stage, Msg, Errno), then Started once it runs, then Signal when a
// signal ended it.
type Reply struct {
	Stage   string
	Msg     string
	Errno   int
	Started bool
	Signal  int
}
