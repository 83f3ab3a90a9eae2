//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox/injail"
)

// A helper spends a few milliseconds starting (the Go runtime), and a
// command's jail a few more before the command runs. A Spare is a helper
// started ahead of a command, for one session, waiting for them: the
// command then pays only for the jail, and not for the parts of it the
// spare makes while it waits (its network namespace with its loopback up,
// the forwarding of stop signals).
//
// It is started in fresh PID, mount, IPC and UTS namespaces like any
// helper, and a network namespace of its own since only commands without
// the network take a spare. Its mount namespace is a copy of the server's
// at that moment: it sees the mounts made before (the session's disk and
// checkout), not those made after. Its owner ends it when those change.
// It holds nothing of any session until Run hands it a command, it runs
// one command only, and it ends with the server (its socket closes).
//
// A spare is for one uid: it joins that uid's cgroups while it waits, so
// the command does not pay for the move. A move between cgroups waits for
// the kernel's RCU grace periods (milliseconds each, one per v1
// hierarchy), the largest part of a jail's set-up otherwise. It is a
// member of those groups from then on, so a KillAll of the uid ends it,
// and it is never handed a command of another uid.

// The server hands a spare a command only while it is younger than
// spareFresh, well within the injail.SpareWait it waits for one.
const spareFresh = 15 * time.Second

// errSpareGone: the spare helper was gone, or never joined its uid's
// cgroups, before it got a word of its command; Run starts one afresh.
var errSpareGone = errors.New("sandbox: the spare helper is gone")

// Spare is a helper started ahead of one command; see Sandbox.Spare.
type Spare struct {
	mu   sync.Mutex
	proc *spareProc // nil once taken or closed
}

// spareProc is the spare's helper and the server's end of its socket.
type spareProc struct {
	cmd     *exec.Cmd
	ours    *os.File
	started time.Time
	uid     uint32 // whose cgroups it joins (when cgroups are in use)
}

// Spare starts a helper for a later command of uid (Spec.Spare). The
// caller ends it with Close unless Run takes it.
func (s *Sandbox) Spare(uid uint32) (*Spare, error) {
	if s.unavailable != nil {
		return nil, s.unavailable
	}
	if !s.inRange(uid) {
		return nil, fmt.Errorf("%w: uid %d is outside the sandbox's range", ErrBadSpec, uid)
	}
	cmd := s.helper()
	cmd.Args = []string{injail.Arg0, injail.SpareArg}
	// Only commands without the network take a spare (Run): its own
	// network namespace is made now, not on the command's way.
	cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWNET
	if s.cg != nil {
		procs, err := s.cg.ensure(uid)
		if err != nil {
			return nil, err
		}
		cmd.Args = append(cmd.Args, procs...)
	}
	ours, err := startNice(cmd)
	if err != nil {
		return nil, err
	}
	return &Spare{proc: &spareProc{cmd: cmd, ours: ours, started: time.Now(), uid: uid}}, nil
}

// spareNice is a waiting spare's priority. Its start-up costs tens of
// milliseconds of CPU (the Go runtime and the package set-up of this
// binary); at the normal priority it competes with the commands and
// requests running meanwhile, on a small host enough to slow each one down
// by more than a spare saves. It takes the normal priority back for its
// command (takeNormalPriority).
const spareNice = 19

// startNice starts cmd, a helper, at spareNice. A new process's nice value
// is that of the thread that forks it, so the fork runs on a thread held
// for it, lowered for the fork and raised back after. The thread is then
// handed back: a thread that ended with its goroutine would take with it
// the children whose parent-death signal is tied to it (internal/tied).
func startNice(cmd *exec.Cmd) (*os.File, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	// The kernel answers 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return nil, fmt.Errorf("sandbox: spare helper's priority: %w", err)
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, spareNice); err != nil {
		return nil, fmt.Errorf("sandbox: spare helper's priority: %w", err)
	}
	ours, err := startHelper(cmd)
	// Root may raise a priority again; were it refused, the thread would
	// only run slower, which is no reason to fail the spare.
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 20-prio)
	return ours, err
}

// take hands the spare's helper to its one command; nil when there is
// none (a nil Spare, or one taken or closed already).
func (sp *Spare) take() *spareProc {
	if sp == nil {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	p := sp.proc
	sp.proc = nil
	return p
}

// fresh reports whether the helper still waits for its command, with a
// margin: it gives up after injail.SpareWait.
func (p *spareProc) fresh() bool { return time.Since(p.started) < spareFresh }

// fresh reports whether a command may still be handed the spare.
func (sp *Spare) fresh() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.proc != nil && sp.proc.fresh()
}

// Close ends the spare's helper unless a command took it, and waits for
// it to be gone.
func (sp *Spare) Close() {
	if p := sp.take(); p != nil {
		p.end()
	}
}

// end kills a helper that got no command, and reaps it.
func (p *spareProc) end() {
	p.ours.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// handOver waits for a spare helper to be in its cgroups, gives it its
// command's stdout and stderr, then its instructions, and waits for the
// command to start.
func (s *Sandbox) handOver(p *spareProc, is *helperSpec, stdout, stderr *os.File) (*helperConn, error) {
	ready := make([]byte, 1)
	p.ours.SetReadDeadline(time.Now().Add(startWait))
	if _, err := io.ReadFull(p.ours, ready); err != nil || ready[0] != injail.SpareReady {
		p.end()
		return nil, fmt.Errorf("%w: not ready: %v", errSpareGone, err)
	}
	p.ours.SetReadDeadline(time.Time{})
	// A spare that said it was ready and was killed since may still take
	// the stdio and the instructions, and fail only where its command
	// would start, too late to start afresh. Its state says so first.
	if state, _, ok := statOf(p.cmd.Process.Pid); !ok || !alive(state) {
		p.end()
		return nil, fmt.Errorf("%w: it died while it waited", errSpareGone)
	}
	rights := unix.UnixRights(int(stdout.Fd()), int(stderr.Fd()))
	raw, err := p.ours.SyscallConn()
	if err != nil {
		p.end()
		return nil, fmt.Errorf("sandbox: spare helper: %w", err)
	}
	var sendErr error
	err = raw.Write(func(fd uintptr) bool {
		sendErr = unix.Sendmsg(int(fd), []byte{0}, rights, nil, 0)
		return !errors.Is(sendErr, unix.EAGAIN)
	})
	if err = errors.Join(err, sendErr); err != nil {
		p.end()
		return nil, fmt.Errorf("%w: %w", errSpareGone, err)
	}
	return s.instructJoined(p.cmd, p.ours, is)
}
