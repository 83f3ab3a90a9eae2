//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A helper spends most of its start-up in the Go runtime and the package
// set-up of this (large) binary, before it reads a word of its
// instructions. A Spare is a helper started ahead of a command, for one
// session, waiting for them: the command then pays only for the jail.
//
// It is started in fresh PID, mount, IPC and UTS namespaces like any
// helper, so its mount namespace is a copy of the server's at that
// moment: it sees the mounts made before (the session's disk and
// checkout), not those made after. Its owner ends it when those change.
// It holds nothing of any session until Run hands it a command, it runs
// one command only, and it ends with the server (its socket closes).

// A spare helper waits this long for its command, then exits: the copy of
// the server's mounts it holds keeps file systems of ended sessions (their
// disks) from going, so it must not hold it for long. The server hands a
// spare a command only while it is younger than spareFresh.
const (
	spareWait  = 20 * time.Second
	spareFresh = 15 * time.Second
)

// errSpareGone: the spare helper was gone before it got a word of its
// command; Run starts one afresh.
var errSpareGone = errors.New("sandbox: the spare helper is gone")

// spareArg is a spare helper's argv[1]: its stdout and stderr come over
// the socket, ahead of the instructions.
const spareArg = "spare"

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
}

// Spare starts a helper for a later command (Spec.Spare). The caller ends
// it with Close unless Run takes it.
func (s *Sandbox) Spare() (*Spare, error) {
	if s.unavailable != nil {
		return nil, s.unavailable
	}
	cmd := s.helper()
	cmd.Args = []string{initArg0, spareArg}
	ours, err := startHelper(cmd)
	if err != nil {
		return nil, err
	}
	return &Spare{proc: &spareProc{cmd: cmd, ours: ours, started: time.Now()}}, nil
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
// margin: it gives up after spareWait.
func (p *spareProc) fresh() bool { return time.Since(p.started) < spareFresh }

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

// handOver gives a spare helper its command's stdout and stderr, then its
// instructions, and waits for the command to start.
func (s *Sandbox) handOver(p *spareProc, is *initSpec, stdout, stderr *os.File) (*helperConn, error) {
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
	return s.instruct(p.cmd, p.ours, is)
}

// receiveStdio is the spare helper's side of handOver: the command's
// stdout and stderr become its own fds 1 and 2 (stdin stays /dev/null).
func receiveStdio(ch *os.File) error {
	fd := int(ch.Fd())
	wait := unix.NsecToTimeval(spareWait.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &wait); err != nil {
		return err
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return err
	}
	var none unix.Timeval
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &none); err != nil {
		return err
	}
	if n != 1 {
		return errors.New("no stdout and stderr from the server")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return errors.Join(errors.New("no stdout and stderr from the server"), err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return err
	}
	if len(fds) != 2 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("%d descriptors from the server, want stdout and stderr", len(fds))
	}
	for i, fd := range fds {
		if err := unix.Dup3(fd, i+1, 0); err != nil {
			return err
		}
		unix.Close(fd)
	}
	return nil
}
