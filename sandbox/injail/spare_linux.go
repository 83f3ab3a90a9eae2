//go:build linux

package injail

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A spare is a helper started ahead of its command (the server's side is
// sandbox.Spare): it makes what it can ahead (enter), joins its uid's
// cgroups and waits, at a low priority, for the command's stdout and
// stderr and then its Spec.

// takeNormalPriority is a spare's first step once it has a command: the
// jail and the command run at the normal priority. Only this thread's
// (the command is forked from it); the helper's other threads have
// nothing left to do.
func takeNormalPriority() error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 0)
}

// receiveStdio is the spare helper's side of handOver: the command's
// stdout and stderr become its own fds 1 and 2 (stdin stays /dev/null).
func receiveStdio(ch *os.File) error {
	fd := int(ch.Fd())
	wait := unix.NsecToTimeval(SpareWait.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &wait); err != nil {
		return err
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(2*4))
	// A receive on a socket with a read wait is never resumed after a
	// signal (the runtime's own preemption among them): it is asked again.
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
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

// joinSpareGroups is how a spare helper gets ready: it joins the cgroups
// the server named (every process of the command then starts inside), and
// says so.
func joinSpareGroups(ch *os.File, procs []string) error {
	for _, p := range procs {
		// The pid is read in the writer's PID namespace: 1, the helper.
		if err := WriteCgroup(p, "1"); err != nil {
			return err
		}
	}
	_, err := ch.Write([]byte{SpareReady})
	return err
}
