//go:build linux

package injail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errProbed ends a probe's helper once the jail stands: sandbox.New only wants to
// know that it can be built.
var errProbed = errors.New("probe done")

// init is the helper's whole life when this process is one: it sets up
// the sandbox, runs the command and exits with its status. Anywhere else
// it returns at once.
func init() {
	if os.Getenv(Env) != "1" {
		return
	}
	ch := os.NewFile(FD, "sandbox-init")
	stage, err := enter(ch)
	if errors.Is(err, errProbed) {
		json.NewEncoder(ch).Encode(Reply{Started: true})
		os.Exit(0)
	}
	msg, errno := "unknown failure", 0
	if err != nil {
		msg = err.Error()
		var en syscall.Errno
		if errors.As(err, &en) {
			errno = int(en)
		}
	}
	json.NewEncoder(ch).Encode(Reply{Stage: stage, Msg: msg, Errno: errno})
	os.Exit(ExitStart)
}

// enter does the helper's job. It starts as PID 1 of new mount, PID, IPC
// and UTS namespaces (the server's clone made them), builds the jail, drops
// to the session's user, starts the command as its child and stays to reap
// and exits with the command's status, never returning then; it returns
// only on failure, with the stage that failed. Several steps act on the
// calling thread only (the network namespace, no_new_privs, the capability
// sets), and a fork copies the calling thread's state, so all of it runs on
// one locked thread.
func enter(ch *os.File) (string, error) {
	runtime.LockOSThread()
	if os.Getuid() != 0 {
		return StageSpec, errors.New("the init helper must start as root")
	}
	// A spare (spare_linux.go) is cloned into a network namespace of its
	// own, since only commands without the network take one, and makes
	// ahead what the command would otherwise wait for.
	spare := len(os.Args) > 1 && os.Args[1] == SpareArg
	var stops chan os.Signal
	if spare {
		if err := LoopbackUp(); err != nil {
			return StageLo, err
		}
		stops = forwardedStops()
		if err := joinSpareGroups(ch, os.Args[2:]); err != nil {
			return StageCgroup, err
		}
		if err := receiveStdio(ch); err != nil {
			return StageSpec, err
		}
		if err := takeNormalPriority(); err != nil {
			return StageLimits, err
		}
	}
	var is Spec
	if err := json.NewDecoder(ch).Decode(&is); err != nil {
		return StageSpec, err
	}
	if !is.Probe && (is.UID == 0 || is.GID == 0 || len(is.Argv) == 0) {
		return StageSpec, errors.New("refusing uid 0, gid 0 or an empty command")
	}
	if os.Getpid() != 1 {
		return StageJail, errors.New("the init helper is not PID 1 of a PID namespace of its own")
	}
	// The jail's own folders and files are for everyone to read; what the
	// command makes is its own.
	syscall.Umask(0o022)

	// Join the cgroups before anything else runs, so every process of the
	// command is inside from the start.
	pid := strconv.Itoa(os.Getpid())
	for _, procs := range is.Cgroups {
		// The pid is read in the writer's PID namespace: 1, the helper.
		if err := WriteCgroup(procs, pid); err != nil {
			return StageCgroup, err
		}
	}

	limits := []struct {
		res int
		val uint64
	}{
		{unix.RLIMIT_NPROC, is.MaxProcs}, // per uid: the uid is the session's alone
		{unix.RLIMIT_CORE, 0},
	}
	for _, l := range limits {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.val, Max: l.val}); err != nil {
			return StageLimits, err
		}
	}

	if err := buildJail(&is); err != nil {
		return StageJail, err
	}
	if is.Probe {
		return StageJail, errProbed
	}
	syscall.Umask(0o077)

	switch {
	case is.JoinNetns:
		if err := joinNetns(); err != nil {
			return StageJoinNetns, err
		}
	case !is.DenyNetwork:
		// Allow always comes with a namespace of its own; never run a
		// command on the host's network.
		return StageJoinNetns, errors.New("no network namespace to join")
	}

	if is.DenyNetwork && !spare {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return StageNetns, err
		}
		if err := LoopbackUp(); err != nil {
			return StageLo, err
		}
	}

	if err := dropCapabilities(); err != nil {
		return StageCaps, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return StageCaps, err
	}
	// The syscall package changes the ids of every thread.
	if err := syscall.Setgroups(nil); err != nil {
		return StageIDs, err
	}
	if err := syscall.Setresgid(int(is.GID), int(is.GID), int(is.GID)); err != nil {
		return StageIDs, err
	}
	if err := syscall.Setresuid(int(is.UID), int(is.UID), int(is.UID)); err != nil {
		return StageIDs, err
	}
	if err := verify(is.UID, is.GID); err != nil {
		return StageVerify, err
	}

	// As the session's user, so a folder it may not enter is refused.
	if err := os.Chdir(is.Dir); err != nil {
		return StageDir, err
	}
	path, err := lookPath(is.Argv[0], is.Env)
	if err != nil {
		return StageExec, err
	}
	if err := resetSignals(); err != nil {
		return StageExec, err
	}
	// Nothing but stdin, stdout and stderr goes to the command.
	if err := unix.CloseRange(FD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		if err := cloexecAll(); err != nil {
			return StageExec, err
		}
	}

	// The system call filter goes on this locked thread right before the
	// fork, so the command inherits it; the helper itself needs nothing
	// the filter refuses from here on (wait4, kill, write, exit).
	if err := installSeccomp(); err != nil {
		return StageSeccomp, err
	}

	if stops == nil {
		stops = forwardedStops()
	}
	// Without a memory cgroup, RLIMIT_DATA (not RLIMIT_AS: Go and JVM
	// tools reserve far more address space than they use) is set by
	// prlimit(1), which lowers its own limit and then execs the command,
	// so the command never runs a single instruction without it. The
	// helper cannot do that itself: Go runs no code between fork and
	// exec, and a limit lowered on the helper around the fork killed it
	// whenever its runtime needed memory meanwhile.
	argv := is.Argv
	if is.MaxData > 0 {
		argv = append([]string{PrlimitPath, fmt.Sprintf("--data=%d:%d", is.MaxData, is.MaxData), "--", path}, is.Argv[1:]...)
		path = PrlimitPath
	}
	child, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir: is.Dir, Env: is.Env, Files: []uintptr{0, 1, 2},
		// A session of its own; a shell takes its terminal as the
		// controlling one (the helper never had it).
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: is.TTY, Ctty: 0},
	})
	if err != nil {
		return StageExec, fmt.Errorf("%s: %w", is.Argv[0], err)
	}
	json.NewEncoder(ch).Encode(Reply{Started: true})
	os.Exit(supervise(ch, child, stops))
	return "", nil
}

// forwardedStops catches the stop signals the server sends the helper, for
// supervise to pass on to the command.
func forwardedStops() chan os.Signal {
	stops := make(chan os.Signal, 4)
	signal.Notify(stops, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	return stops
}

// supervise is PID 1's life once the command runs: it passes the stop
// signals the server sends on to every process of the namespace, reaps
// orphans, and when the command has exited reports how and returns its
// exit code. The helper's exit then ends whatever else of the command is
// left: the kernel kills a PID namespace whose init is gone.
func supervise(ch *os.File, child int, forward <-chan os.Signal) int {
	go func() {
		for sig := range forward {
			unix.Kill(-1, sig.(syscall.Signal)) // every process of the namespace but PID 1
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// No child left, which cannot be while the command runs.
			return ExitStart
		}
		if pid != child {
			continue // an orphan
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			// PID 1 cannot die of a signal of its own, so the signal goes
			// to the server in words and the exit code says it as a shell
			// would.
			json.NewEncoder(ch).Encode(Reply{Signal: int(ws.Signal())})
			return 128 + int(ws.Signal())
		}
	}
}

// LoopbackUp brings up lo in the new network namespace (what `ip link set
// lo up` does), so servers a command starts on 127.0.0.1 are reachable.
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dropCapabilities empties the ambient and bounding sets and the
// inheritable set, so nothing can bring a capability back after the
// switch to the session's uid (which clears the permitted and effective
// sets).
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err == unix.EINVAL {
			break // past the last capability of this kernel
		}
		if err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// verify reads back what the kernel says about this thread, refusing to
// exec unless every id is the session's, no group is left, no_new_privs is
// set and every capability set is empty.
func verify(uid, gid uint32) error {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	want := map[string]string{
		"Uid":        strings.Repeat(strconv.FormatUint(uint64(uid), 10)+" ", 4),
		"Gid":        strings.Repeat(strconv.FormatUint(uint64(gid), 10)+" ", 4),
		"Groups":     "",
		"NoNewPrivs": "1 ",
		"CapInh":     "0000000000000000 ",
		"CapPrm":     "0000000000000000 ",
		"CapEff":     "0000000000000000 ",
		"CapBnd":     "0000000000000000 ",
		"CapAmb":     "0000000000000000 ",
	}
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		w, check := want[key]
		if !ok || !check {
			continue
		}
		seen++
		got := ""
		for _, f := range strings.Fields(val) {
			got += f + " "
		}
		if got != w {
			return fmt.Errorf("%s is %q, want %q", key, strings.TrimSpace(got), strings.TrimSpace(w))
		}
	}
	if seen != len(want) {
		return fmt.Errorf("/proc/thread-self/status lacks some of %d fields", len(want))
	}
	return nil
}

// lookPath finds name on the PATH of env, as the session's user.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			path = p
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, syscall.ENOENT)
}

// resetSignals gives the command default signal handling: execve keeps a
// signal ignored when it was, and the server may have been started with
// SIGINT or SIGHUP ignored (nohup, a background job), which would reach
// people's shells. It also unblocks every signal on this thread.
func resetSignals() error {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	var ignored uint64
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("SigIgn:")); ok {
			ignored, err = strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
			if err != nil {
				return err
			}
		}
	}
	// struct sigaction of the kernel: handler, flags, restorer, mask. All
	// zero is SIG_DFL.
	var dfl struct {
		handler, flags, restorer uintptr
		mask                     uint64
	}
	for sig := 1; sig <= 64; sig++ {
		if ignored&(1<<(sig-1)) == 0 || sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		_, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		if errno != 0 {
			return fmt.Errorf("reset signal %d: %w", sig, errno)
		}
	}
	var none unix.Sigset_t
	return unix.PthreadSigmask(unix.SIG_SETMASK, &none, nil)
}

// cloexecAll marks every descriptor from 3 up close-on-exec, for kernels
// without close_range.
func cloexecAll() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < FD {
			continue
		}
		unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
	return nil
}

// joinNetns puts the init helper's thread into the namespace the server
// made for it.
func joinNetns() error {
	if err := unix.Setns(NetnsFD, unix.CLONE_NEWNET); err != nil {
		return err
	}
	return unix.Close(NetnsFD)
}

// WriteCgroup writes value to a cgroup's file path.
func WriteCgroup(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
