//go:build linux

package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"atelier/internal/txwatch"
	"atelier/sandbox/injail"
)

// startWait bounds the helper's set-up, from its start to the exec of the
// command.
const startWait = 30 * time.Second

// Sandbox runs commands as sessions' users, each in a jail of its own. It
// is safe for concurrent use; commands and shells of one uid may overlap,
// since the end of each ends only its own PID namespace.
type Sandbox struct {
	cfg Config
	log *slog.Logger
	cg  *cgroups // nil: rlimits only
	// path is the PATH inside: the usual folders, the host's toolchains
	// found at start and Config.Path.
	path string
	// unavailable says why no jail can be built on this host; every
	// command then fails with ErrUnavailable.
	unavailable error
	// groups is held shared from making a uid's cgroups until the command
	// has joined them (its exec), and exclusively while KillAll removes
	// them, so a command starting beside a KillAll never finds its group
	// gone.
	groups sync.RWMutex
	// stack and unshare are the tools of Network Allow (egress_linux.go);
	// stackErr says why Allow is refused when they are missing.
	stack, unshare string
	stackErr       error
	// helperPath is what a helper executes: /proc/self/exe, or Config.Helper
	// through the descriptor helperFile holds open.
	helperPath string
	helperFile *os.File
}

// New checks cfg and finds the cgroups to use. The server must run as
// root.
func New(cfg Config) (*Sandbox, error) {
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
	if cfg.ROPaths == nil {
		cfg.ROPaths = DefaultROPaths
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = injail.HostResolvConf
	}
	for _, p := range append(append([]string{}, cfg.ROPaths...), cfg.Path...) {
		if !cleanAbs(p) || p == "/" || strings.ContainsAny(p, ":\x00") {
			return nil, fmt.Errorf("%w: %q is not a clean absolute folder below /", ErrBadConfig, p)
		}
	}
	s := &Sandbox{cfg: cfg, log: cfg.Log, path: jailPath(cfg.Path), helperPath: "/proc/self/exe"}
	if cfg.Helper != "" {
		f, err := openHelper(cfg.Helper)
		if err != nil {
			return nil, err
		}
		s.helperFile, s.helperPath = f, "/proc/self/fd/"+strconv.Itoa(int(f.Fd()))
	}
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
	err := s.probe()
	if err == nil && s.cg == nil {
		if err = unix.Access(injail.PrlimitPath, unix.X_OK); err != nil {
			err = fmt.Errorf("sandbox: without cgroups, a command's memory is limited through %s (util-linux), which is missing: %w", injail.PrlimitPath, err)
		}
	}
	if err != nil {
		s.unavailable = err
		s.log.Error("sandbox: commands and terminals are off: the jail cannot be built on this host", "err", err)
	} else {
		s.log.Info("sandbox: jail ready", "readonly", cfg.ROPaths, "path", s.path)
	}
	return s, nil
}

// jailPath is the PATH inside: the usual folders, then Go's toolchain when
// the host has it where its installer puts it, then extra.
func jailPath(extra []string) string {
	dirs := strings.Split(cleanPath, ":")
	if st, err := os.Stat("/usr/local/go/bin/go"); err == nil && st.Mode().IsRegular() {
		dirs = append(dirs, "/usr/local/go/bin")
	}
	for _, d := range extra {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return strings.Join(dirs, ":")
}

// Has reports whether name is a program on the PATH inside whose folder is
// among the read-only paths, as the host has it now; the session page uses
// it to suggest a command that works.
func (s *Sandbox) Has(name string) bool {
	for _, d := range strings.Split(s.path, ":") {
		visible := false
		for _, ro := range s.cfg.ROPaths {
			visible = visible || d == ro || strings.HasPrefix(d, ro+"/")
		}
		if st, err := os.Stat(filepath.Join(d, name)); visible && err == nil && st.Mode().IsRegular() && st.Mode()&0o001 != 0 {
			return true
		}
	}
	return false
}

// Unavailable is why commands cannot run on this host, or nil.
func (s *Sandbox) Unavailable() error { return s.unavailable }

// probe builds a jail once, without a command, to learn at start whether
// this host has what the jail needs.
func (s *Sandbox) probe() error {
	cmd := s.helper()
	conn, err := s.launch(cmd, &helperSpec{Spec: injail.Spec{Probe: true, ROPaths: s.cfg.ROPaths}})
	if err != nil {
		return err
	}
	conn.close()
	cmd.Wait()
	return nil
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
	if s.helperFile != nil {
		s.helperFile.Close()
	}
	return nil
}

// openHelper opens Config.Helper for the helpers to execute, once it is
// known to be a regular file that only root may change: whoever could
// write it would run as root.
func openHelper(path string) (*os.File, error) {
	if !cleanAbs(path) {
		return nil, fmt.Errorf("%w: helper %q is not a clean absolute path", ErrBadConfig, path)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: helper: %w", ErrBadConfig, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: helper: %w", ErrBadConfig, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o022 != 0 || st.Mode&0o100 == 0 {
		f.Close()
		return nil, fmt.Errorf("%w: helper %s must be an executable file of root's that nobody else may write", ErrBadConfig, path)
	}
	return f, nil
}

func (s *Sandbox) inRange(id uint32) bool {
	return id >= s.cfg.UIDBase && uint64(id) < uint64(s.cfg.UIDBase)+uint64(s.cfg.UIDCount)
}

// Run runs spec in the sandbox and returns when it and every other process
// of its uid have ended. Errors are *RunError; a Deny that cannot be
// enforced is a Start error wrapping ErrNetworkUnenforceable.
func (s *Sandbox) Run(ctx context.Context, spec Spec, lim Limits) (*Result, error) {
	txwatch.Slow(ctx, "sandbox run")
	if spec.TTY != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: fmt.Errorf("%w: a TTY is for Start", ErrBadSpec)}
	}
	is, err := s.prepare(spec)
	if err != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: err}
	}
	eg, err := s.openEgress(spec.Network, is.resolvers)
	if err != nil {
		return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: err}
	}
	defer eg.end() // run returns once every process of the command is gone
	is.JoinNetns = eg != nil
	spare := spec.Spare.take()
	// A spare is in its uid's cgroups: never another uid's command.
	if spare != nil && (spec.Stdin != nil || eg != nil || !spare.fresh() || spare.uid != spec.UID) {
		spare.end()
		spare = nil
	}
	started := false
	res, err := run(ctx, lim, spec.Output, func(stdout, stderr *os.File) (*exec.Cmd, tree, error) {
		started = true
		cmd, tr, err := s.startRun(spec, is, eg, spare, stdout, stderr)
		if err == nil && spec.Started != nil {
			spec.Started()
		}
		return cmd, tr, err
	})
	if !started && spare != nil {
		// Canceled before it started: the spare ran nothing, and would
		// wait out its time for nothing.
		spare.end()
	}
	return res, err
}

// startRun starts Run's command in spare when it can, else in a helper of
// its own.
func (s *Sandbox) startRun(spec Spec, is *helperSpec, eg *egress, spare *spareProc, stdout, stderr *os.File) (*exec.Cmd, tree, error) {
	if spare != nil {
		conn, err := s.handOver(spare, is, stdout, stderr)
		if err == nil {
			return spare.cmd, &nsTree{pid: spare.cmd.Process.Pid, conn: conn}, nil
		}
		if !errors.Is(err, errSpareGone) {
			return nil, nil, err
		}
	}
	cmd := s.helper()
	cmd.ExtraFiles = eg.files()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, stdout, stderr
	// A Stdin that is not a file is copied by a goroutine; do not let
	// it hold Wait once the command is gone.
	cmd.WaitDelay = drainWait
	conn, err := s.launch(cmd, is)
	if err != nil {
		return nil, nil, err
	}
	return cmd, &nsTree{pid: cmd.Process.Pid, conn: conn}, nil
}

// Process is a sandboxed process started by Start.
type Process struct {
	cmd  *exec.Cmd
	conn *helperConn
	eg   *egress // Allow's network, ended with the shell
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
	eg, err := s.openEgress(spec.Network, is.resolvers)
	if err != nil {
		return nil, err
	}
	is.JoinNetns = eg != nil
	is.TTY = true // the shell, not the helper, takes it as its controlling terminal
	cmd := s.helper()
	cmd.ExtraFiles = eg.files()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.TTY, spec.TTY, spec.TTY
	conn, err := s.launch(cmd, is)
	if err != nil {
		eg.end()
		return nil, err
	}
	return &Process{cmd: cmd, conn: conn, eg: eg}, nil
}

// Pid is the process id of the shell's init helper, PID 1 of its
// namespace: signals to it reach the shell's namespace (SIGTERM, SIGINT
// and SIGHUP are passed on, SIGKILL ends all of it).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Wait waits for the shell to exit; what it left behind in its namespace
// ends with it, and so does its network under Allow. Other shells and
// commands of the same uid are not touched. A non-zero exit is an
// *exec.ExitError: the exit code, 128 plus the signal's number when a
// signal ended the shell, or the signal that killed the helper.
func (p *Process) Wait() error {
	defer p.eg.end()
	err := p.cmd.Wait()
	p.conn.close()
	return err
}

// helperSpec is the helper's Spec and what the server keeps beside it.
type helperSpec struct {
	injail.Spec
	// resolvers are the name servers ResolvConf names, for the egress
	// filter; the helper does not need them.
	resolvers []netip.Addr
}

// DefaultROPaths are the host's folders a command sees read-only, those of
// them that exist.
var DefaultROPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt"}

// jailDir is where the host folder dir of the checkout is inside.
func jailDir(workspace, dir string) (string, bool) {
	if dir == workspace {
		return injail.Workspace, true
	}
	rel, ok := strings.CutPrefix(dir, workspace+"/")
	if !ok || workspace == "" {
		return "", false
	}
	return injail.Workspace + "/" + rel, true
}

// prepare checks spec and turns it into the helper's instructions.
func (s *Sandbox) prepare(spec Spec) (*helperSpec, error) {
	switch {
	case !s.inRange(spec.UID) || !s.inRange(spec.GID):
		return nil, fmt.Errorf("%w: uid %d / gid %d outside [%d, %d)", ErrBadSpec, spec.UID, spec.GID,
			s.cfg.UIDBase, uint64(s.cfg.UIDBase)+uint64(s.cfg.UIDCount))
	case !cleanAbs(spec.Dir) || !cleanAbs(spec.Home) || (spec.Workspace != "" && !cleanAbs(spec.Workspace)) ||
		(spec.Tmp != "" && !cleanAbs(spec.Tmp)) || (spec.Cache != "" && !cleanAbs(spec.Cache)):
		return nil, fmt.Errorf("%w: Dir, Workspace, Home, Tmp and Cache must be clean absolute paths", ErrBadSpec)
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
	env, err := s.environ(spec)
	if err != nil {
		return nil, err
	}
	if s.unavailable != nil {
		return nil, s.unavailable
	}
	workspace := spec.Workspace
	if workspace == "" {
		workspace = spec.Dir
	}
	dir, ok := jailDir(workspace, spec.Dir)
	if !ok {
		return nil, fmt.Errorf("%w: Dir %s is not in Workspace %s", ErrBadSpec, spec.Dir, workspace)
	}
	is := &helperSpec{Spec: injail.Spec{
		UID: spec.UID, GID: spec.GID, Dir: dir, Argv: spec.Argv,
		Env:         env,
		DenyNetwork: spec.Network != Allow,
		MaxProcs:    uint64(s.cfg.MaxProcs),
		Workspace:   workspace, Home: spec.Home, Tmp: spec.Tmp, ROPaths: s.cfg.ROPaths,
		Cache: spec.Cache,
	}}
	if s.cg == nil {
		is.MaxData = uint64(s.cfg.MaxMemory)
	}
	is.ResolvConf, is.ResolvAt, is.resolvers = s.resolvConf(spec.Network)
	return is, nil
}

// environ is the whole environment of a sandboxed process, the one place
// it is built: a one-shot command, a check and a terminal's shell get the
// same PATH, HOME and LANG, so what works in one works in the others.
// TERM says what reads the output: the page's xterm.js for a shell on a
// TTY, plain text otherwise. ExtraEnv may name another TERM, nothing else.
func (s *Sandbox) environ(spec Spec) ([]string, error) {
	term := "TERM=dumb"
	if spec.TTY != nil {
		term = "TERM=xterm-256color"
	}
	for _, e := range spec.ExtraEnv {
		if !strings.HasPrefix(e, "TERM=") || strings.IndexByte(e, 0) >= 0 {
			return nil, fmt.Errorf("%w: only TERM may be added to the environment", ErrBadSpec)
		}
		term = e
	}
	return append([]string{"PATH=" + s.path, "HOME=" + injail.Home, "LANG=C.UTF-8", term}, cacheEnv()...), nil
}

const cleanPath = "/usr/local/bin:/usr/bin:/bin"

func cleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

// helper is the command that re-executes this binary (or Config.Helper)
// as the init helper, as PID 1 of new PID, mount, IPC and UTS namespaces.
// /proc/self/exe is the running binary even when its file was replaced by
// an upgrade. The
// helper gets an environment of only the marker.
func (s *Sandbox) helper() *exec.Cmd {
	return &exec.Cmd{
		Path: s.helperPath,
		Args: []string{injail.Arg0},
		Env:  []string{injail.Env + "=1"},
		Dir:  "/",
		SysProcAttr: &syscall.SysProcAttr{Setsid: true,
			Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS},
	}
}

// helperConn is the server's end of the socket to a running helper.
type helperConn struct {
	f   *os.File
	dec *json.Decoder
}

// signaled reads the helper's last word once it has exited: the signal
// that ended the command, or 0.
func (c *helperConn) signaled() syscall.Signal {
	c.f.SetReadDeadline(time.Now().Add(drainWait))
	var r injail.Reply
	if c.dec.Decode(&r) != nil {
		return 0
	}
	return syscall.Signal(r.Signal)
}

func (c *helperConn) close() { c.f.Close() }

// launch starts the helper, sends it is over a socket that becomes its
// fd 3, and waits for its word that the command started, or its failure.
// The socket stays open while the command runs, for the helper to say
// which signal ended it.
func (s *Sandbox) launch(cmd *exec.Cmd, is *helperSpec) (*helperConn, error) {
	ours, err := startHelper(cmd)
	if err != nil {
		return nil, err
	}
	return s.instruct(cmd, ours, is)
}

// startHelper starts cmd, a helper, with a socket to it as its fd 3, and
// answers the server's end.
func startHelper(cmd *exec.Cmd) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	// Non-blocking, so that os.File has deadlines.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "sandbox-init"), os.NewFile(uintptr(fds[1]), "sandbox-init")
	cmd.ExtraFiles = append([]*os.File{theirs}, cmd.ExtraFiles...)
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		ours.Close()
		// The clone itself failed: a namespace kind the kernel refuses.
		return nil, fmt.Errorf("%w: new PID, mount, IPC and UTS namespaces: %w", ErrUnavailable, err)
	}
	return ours, nil
}

// instruct sends a started helper is, with the uid's cgroups to join,
// and waits for its word that the command started, or its failure, which
// ends the helper.
func (s *Sandbox) instruct(cmd *exec.Cmd, ours *os.File, is *helperSpec) (*helperConn, error) {
	if s.cg != nil && !is.Probe {
		s.groups.RLock()
		defer s.groups.RUnlock()
		procs, err := s.cg.ensure(is.UID)
		if err != nil {
			ours.Close()
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
		is.Cgroups = procs
	}
	return s.instructJoined(cmd, ours, is)
}

// instructJoined is instruct for a helper already in the cgroups it needs
// (a spare of the uid, or any helper when cgroups are not in use).
func (s *Sandbox) instructJoined(cmd *exec.Cmd, ours *os.File, is *helperSpec) (*helperConn, error) {
	ours.SetDeadline(time.Now().Add(startWait))
	conn := &helperConn{f: ours, dec: json.NewDecoder(ours)}
	// Without the newline json.Encoder adds: the helper's decoder stops at
	// the closing brace, and a byte left unread in its socket makes the
	// close a reset (ECONNRESET here) instead of the end of the stream.
	spec, err := json.Marshal(is)
	if err == nil {
		_, err = ours.Write(spec)
	}
	var r injail.Reply
	if err == nil {
		err = conn.dec.Decode(&r)
	}
	if err == nil && r.Started {
		ours.SetDeadline(time.Time{})
		return conn, nil
	}
	ours.Close()
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("sandbox: init helper: %w", err)
	}
	ie := &initError{r}
	switch r.Stage {
	case injail.StageNetns:
		return nil, fmt.Errorf("%w: %w", ErrNetworkUnenforceable, ie)
	case injail.StageJail:
		// In words only: the errno of a mount is the host's trouble, not
		// a missing file of the person's.
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, ie)
	}
	if r.Stage == injail.StageJoinNetns {
		return nil, fmt.Errorf("%w: %w", ErrNetworkUnavailable, ie)
	}
	return nil, ie
}

// initError is a failure the helper reported. It unwraps to its errno, so
// errors.Is(err, fs.ErrNotExist) holds for a missing command.
type initError struct{ r injail.Reply }

func (e *initError) Error() string {
	return "init helper: " + e.r.Stage + ": " + e.r.Msg
}

func (e *initError) Unwrap() error {
	if e.r.Errno == 0 {
		return nil
	}
	return syscall.Errno(e.r.Errno)
}

// nsTree is a sandboxed command's tree: its helper, PID 1 of the
// command's PID namespace. The helper passes SIGTERM on to the namespace;
// SIGKILL ends the helper and with it every process of the namespace, and
// the helper turns zombie only once they are all gone.
type nsTree struct {
	pid  int
	conn *helperConn
}

func (t *nsTree) signal(sig unix.Signal) { unix.Kill(t.pid, sig) }

func (t *nsTree) kill(ctx context.Context) error {
	return killLoop(ctx, func() (int, error) {
		if state, _, ok := statOf(t.pid); !ok || !alive(state) {
			return 0, nil
		}
		unix.Kill(t.pid, unix.SIGKILL)
		return 1, nil
	}, fmt.Sprintf("namespace of %d", t.pid))
}

func (t *nsTree) signaled(wanted bool) syscall.Signal {
	defer t.conn.close()
	if !wanted {
		return 0
	}
	return t.conn.signaled()
}
