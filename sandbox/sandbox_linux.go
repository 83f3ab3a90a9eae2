//go:build linux

package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startWait bounds the helper's set-up, from its start to the exec of the
// command.
const startWait = 30 * time.Second

// Sandbox runs commands as sessions' users. It is safe for concurrent use;
// commands of one uid must not overlap, because the end of each kills
// every process of its uid.
type Sandbox struct {
	cfg Config
	log *slog.Logger
	cg  *cgroups // nil: rlimits only
	// groups is held shared from making a uid's cgroups until the command
	// has joined them (its exec), and exclusively while KillAll removes
	// them, so a command starting beside a KillAll never finds its group
	// gone.
	groups sync.RWMutex
	// stack and unshare are the tools of Network Allow (egress_linux.go);
	// stackErr says why Allow is refused when they are missing.
	stack, unshare string
	stackErr       error
}

// New checks cfg and finds the cgroups to use. The server must run as root
// and its main must have called Init.
func New(cfg Config) (*Sandbox, error) {
	if !initCalled.Load() {
		return nil, ErrInitMissing
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if cfg.UIDBase == 0 && cfg.UIDCount == 0 {
		cfg.UIDBase, cfg.UIDCount = DefaultUIDBase, DefaultUIDCount
	}
	if cfg.MaxProcs <= 0 {
		cfg.MaxProcs = DefaultMaxProcs
	}
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory = DefaultMaxMemory
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	if err := checkRange(cfg.UIDBase, cfg.UIDCount); err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: cfg, log: cfg.Log}
	s.findEgress()
	switch cfg.CgroupRoot {
	case "-":
		s.log.Info("sandbox: cgroups off by configuration; rlimits only")
	default:
		cg, err := findCgroups(cfg.CgroupRoot, cfg.CgroupParent, cfg.MaxProcs, cfg.MaxMemory)
		switch {
		case err == nil:
			s.cg = cg
			s.log.Info("sandbox: cgroups in use", "mode", cg.mode(), "groups", cg.parents)
			s.limitTotals() // limits_linux.go
		case cfg.CgroupRoot != "":
			return nil, fmt.Errorf("%w: cgroups under %s: %w", ErrBadConfig, cfg.CgroupRoot, err)
		default:
			s.log.Warn("sandbox: no usable cgroups; memory is limited per process (RLIMIT_DATA)", "err", err)
		}
	}
	return s, nil
}

// checkRange refuses uid ranges that reach system or ordinary accounts, the
// ids -1 and -2, or a range of /etc/subuid or /etc/subgid.
func checkRange(base, count uint32) error {
	const lowest = 1 << 20 // well above ordinary accounts and nobody (65534)
	end := uint64(base) + uint64(count)
	switch {
	case count == 0:
		return fmt.Errorf("%w: UIDCount is 0", ErrBadConfig)
	case base < lowest:
		return fmt.Errorf("%w: UIDBase %d is below %d, among ordinary accounts", ErrBadConfig, base, lowest)
	case end > 1<<32-2:
		return fmt.Errorf("%w: uids %d+%d reach the reserved ids -1 and -2", ErrBadConfig, base, count)
	}
	for _, file := range []string{"/etc/subuid", "/etc/subgid"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
			if len(parts) != 3 {
				continue
			}
			lo, err1 := strconv.ParseUint(parts[1], 10, 32)
			n, err2 := strconv.ParseUint(parts[2], 10, 32)
			if err1 == nil && err2 == nil && lo < end && uint64(base) < lo+n {
				f.Close()
				return fmt.Errorf("%w: uids %d+%d overlap %s of %s", ErrBadConfig, base, count, file, parts[0])
			}
		}
		f.Close()
	}
	return nil
}

// CgroupMode is "v1" or "v2" when commands run in cgroups, "" when they
// have rlimits only.
func (s *Sandbox) CgroupMode() string {
	if s.cg == nil {
		return ""
	}
	return s.cg.mode()
}

// Close removes the sandbox's empty cgroups. It does not kill anything.
func (s *Sandbox) Close() error {
	if s.cg != nil {
		s.groups.Lock()
		s.cg.close()
		s.groups.Unlock()
	}
	return nil
}

func (s *Sandbox) inRange(id uint32) bool {
	return id >= s.cfg.UIDBase && uint64(id) < uint64(s.cfg.UIDBase)+uint64(s.cfg.UIDCount)
}

// Run runs spec in the sandbox and returns when it and every other process
// of its uid have ended. Errors are *RunError; a Deny that cannot be
// enforced is a Start error wrapping ErrNetworkUnenforceable.
func (s *Sandbox) Run(ctx context.Context, spec Spec, lim Limits) (*Result, error) {
	if spec.TTY != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: fmt.Errorf("%w: a TTY is for Start", ErrBadSpec)}
	}
	is, err := s.prepare(spec)
	if err != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: err}
	}
	eg, err := s.openEgress(spec.Network)
	if err != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: err}
	}
	defer eg.end() // run returns once every process of the command is gone
	is.JoinNetns = eg != nil
	return run(ctx, lim, func(stdout, stderr *os.File) (*exec.Cmd, tree, error) {
		cmd := s.helper()
		cmd.ExtraFiles = eg.files()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, stdout, stderr
		// A Stdin that is not a file is copied by a goroutine; do not let
		// it hold Wait once the command is gone.
		cmd.WaitDelay = drainWait
		if err := s.launch(cmd, is); err != nil {
			return nil, nil, err
		}
		return cmd, &uidTree{s: s, uid: spec.UID, pid: cmd.Process.Pid}, nil
	})
}

// Process is a sandboxed process started by Start.
type Process struct {
	s   *Sandbox
	uid uint32
	cmd *exec.Cmd
	eg  *egress // Allow's network, ended with the shell
}

// Start starts spec, an interactive shell, on spec.TTY, which becomes its
// stdin, stdout, stderr and controlling terminal in a new session. The
// caller owns the PTY (and may close its copy of the slave once Start
// returns).
func (s *Sandbox) Start(spec Spec) (*Process, error) {
	if spec.TTY == nil {
		return nil, fmt.Errorf("%w: Start needs a TTY", ErrBadSpec)
	}
	if spec.Stdin != nil {
		return nil, fmt.Errorf("%w: Start reads the TTY, not Stdin", ErrBadSpec)
	}
	is, err := s.prepare(spec)
	if err != nil {
		return nil, err
	}
	eg, err := s.openEgress(spec.Network)
	if err != nil {
		return nil, err
	}
	is.JoinNetns = eg != nil
	cmd := s.helper()
	cmd.ExtraFiles = eg.files()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.TTY, spec.TTY, spec.TTY
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0 // the child's stdin
	if err := s.launch(cmd, is); err != nil {
		eg.end()
		return nil, err
	}
	return &Process{s: s, uid: spec.UID, cmd: cmd, eg: eg}, nil
}

// Pid is the process id of the shell.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Wait waits for the shell to exit. It kills nothing else: other shells
// and commands of the same uid may still be running, so what the shell
// left behind is for the caller to end (its session's processes, or
// KillAll of the uid when nothing of it should run). A non-zero exit is an
// *exec.ExitError, which carries the exit code or signal. The shell's
// network, under Allow, ends with it.
func (p *Process) Wait() error {
	defer p.eg.end()
	return p.cmd.Wait()
}

// initSpec is what the init helper is told: everything it needs to set up
// and exec the command.
type initSpec struct {
	UID, GID    uint32
	Dir         string
	Argv        []string
	Env         []string
	DenyNetwork bool
	JoinNetns   bool // Allow: join the namespace at fd 4 (egress_linux.go)
	MaxProcs    uint64
	MaxData     uint64   // RLIMIT_DATA; 0 leaves it (a memory cgroup limits instead)
	Cgroups     []string // cgroup.procs files to join
}

// initReply is the helper's report of a failure before exec. Success is
// silence: the channel closes with the exec.
type initReply struct {
	Stage string
	Msg   string
	Errno int
}

// prepare checks spec and turns it into the helper's instructions.
func (s *Sandbox) prepare(spec Spec) (*initSpec, error) {
	switch {
	case !s.inRange(spec.UID) || !s.inRange(spec.GID):
		return nil, fmt.Errorf("%w: uid %d / gid %d outside [%d, %d)", ErrBadSpec, spec.UID, spec.GID,
			s.cfg.UIDBase, uint64(s.cfg.UIDBase)+uint64(s.cfg.UIDCount))
	case !cleanAbs(spec.Dir) || !cleanAbs(spec.Home):
		return nil, fmt.Errorf("%w: Dir and Home must be clean absolute paths", ErrBadSpec)
	case len(spec.Argv) == 0 || spec.Argv[0] == "":
		return nil, fmt.Errorf("%w: no command", ErrBadSpec)
	case spec.Network != "" && spec.Network != Deny && spec.Network != Allow:
		return nil, fmt.Errorf("%w: network %q is neither deny nor allow", ErrBadSpec, spec.Network)
	}
	for _, a := range spec.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("%w: an argument holds a NUL byte", ErrBadSpec)
		}
	}
	term := "TERM=dumb"
	for _, e := range spec.ExtraEnv {
		if !strings.HasPrefix(e, "TERM=") || strings.IndexByte(e, 0) >= 0 {
			return nil, fmt.Errorf("%w: only TERM may be added to the environment", ErrBadSpec)
		}
		term = e
	}
	is := &initSpec{
		UID: spec.UID, GID: spec.GID, Dir: spec.Dir, Argv: spec.Argv,
		Env:         []string{"PATH=" + cleanPath, "HOME=" + spec.Home, "LANG=C.UTF-8", term},
		DenyNetwork: spec.Network != Allow,
		MaxProcs:    uint64(s.cfg.MaxProcs),
	}
	if s.cg == nil {
		is.MaxData = uint64(s.cfg.MaxMemory)
	}
	return is, nil
}

const cleanPath = "/usr/local/bin:/usr/bin:/bin"

func cleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

// helper is the command that re-executes this binary as the init helper.
// /proc/self/exe is the running binary even when its file was replaced by
// an upgrade. The helper gets an environment of only the marker.
func (s *Sandbox) helper() *exec.Cmd {
	return &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{initArg0},
		Env:         []string{initEnv + "=1"},
		Dir:         "/",
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
}

// launch starts the helper, sends it is over a socket that becomes its
// fd 3, and waits for the exec: the socket closes with nothing on it
// (close-on-exec), or carries the helper's failure.
func (s *Sandbox) launch(cmd *exec.Cmd, is *initSpec) error {
	if s.cg != nil {
		s.groups.RLock()
		defer s.groups.RUnlock()
		procs, err := s.cg.ensure(is.UID)
		if err != nil {
			return err
		}
		is.Cgroups = procs
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: socketpair: %w", err)
	}
	// Non-blocking, so that os.File has deadlines.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return fmt.Errorf("sandbox: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "sandbox-init"), os.NewFile(uintptr(fds[1]), "sandbox-init")
	defer ours.Close()
	cmd.ExtraFiles = append([]*os.File{theirs}, cmd.ExtraFiles...)
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return fmt.Errorf("sandbox: start init helper: %w", err)
	}
	ours.SetDeadline(time.Now().Add(startWait))
	// Without the newline json.Encoder adds: the helper's decoder stops at
	// the closing brace, and a byte left unread when it execs makes the
	// close a reset (ECONNRESET here) instead of the end of the stream.
	spec, err := json.Marshal(is)
	if err == nil {
		_, err = ours.Write(spec)
	}
	var reply []byte
	if err == nil {
		reply, err = io.ReadAll(ours)
	}
	if err == nil && len(reply) == 0 {
		return nil
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		return fmt.Errorf("sandbox: init helper: %w", err)
	}
	var r initReply
	if jerr := json.Unmarshal(reply, &r); jerr != nil {
		return fmt.Errorf("sandbox: init helper: unreadable reply %q", reply)
	}
	ie := &initError{r}
	if r.Stage == stageNetns {
		return fmt.Errorf("%w: %w", ErrNetworkUnenforceable, ie)
	}
	if r.Stage == stageJoinNetns {
		return fmt.Errorf("%w: %w", ErrNetworkUnavailable, ie)
	}
	return ie
}

// initError is a failure the helper reported. It unwraps to its errno, so
// errors.Is(err, fs.ErrNotExist) holds for a missing command.
type initError struct{ r initReply }

func (e *initError) Error() string {
	return "init helper: " + e.r.Stage + ": " + e.r.Msg
}

func (e *initError) Unwrap() error {
	if e.r.Errno == 0 {
		return nil
	}
	return syscall.Errno(e.r.Errno)
}

// uidTree is a sandboxed command's tree: every process of its uid, and the
// main process even while it is still root in the helper.
type uidTree struct {
	s   *Sandbox
	uid uint32
	pid int
}

func (t *uidTree) signal(sig unix.Signal) {
	unix.Kill(t.pid, sig)
	signalUID(t.uid, sig)
}

func (t *uidTree) kill(ctx context.Context) error {
	unix.Kill(t.pid, unix.SIGKILL)
	return t.s.KillAll(ctx, t.uid)
}
