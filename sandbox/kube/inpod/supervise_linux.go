//go:build linux

package inpod

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A command in a pod runs as the same user, in the same PID namespace, as
// whatever the server execs there: `kill -9 -1` would end the helper that
// reports on it, and with it the command's answer. Only the container's
// main process is out of its reach (the kernel delivers no signal to a
// PID namespace's 1 from inside that it has not asked for, and SIGKILL
// never), so commands run under it: the exec'd helper (run -supervised)
// hands the main process its exec stream's input and output over a unix
// socket, and the main process runs the command on them and writes its
// frames and status there itself. A runtime keeps an exec stream open
// while any process holds its output (a background process under
// `kubectl exec` holds it so), so the answer arrives even when the
// command has ended the helper.

// supervisorSocket is the abstract unix socket the main process listens
// on: named by the PID namespace, which it and every exec'd helper of its
// container share, so the containers of a pod (one network namespace)
// and pods sharing a host's network each have their own.
func supervisorSocket() (string, error) {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "", fmt.Errorf("inpod: the PID namespace: %w", err)
	}
	return "@atelier-sandbox-pod." + strings.Trim(strings.TrimPrefix(ns, "pid:"), "[]"), nil
}

// supervisor runs the commands the exec'd helpers hand it, one at a time
// (a session's commands come one at a time), and reaps every orphan of
// the container but the main process of the command it runs, whose
// status the command's own Wait collects.
type supervisor struct {
	log io.Writer

	mu    sync.Mutex // held across a command's start, so reap sees its pid spared
	spare int        // the running command's main process, while it has not been waited for
	busy  bool
}

// start starts cmd with its pid spared from reap until done.
func (s *supervisor) start(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	s.spare = cmd.Process.Pid
	return nil
}

// waited lets reap take every zombie again.
func (s *supervisor) waited() {
	s.mu.Lock()
	s.spare = 0
	s.mu.Unlock()
}

// reap waits for every child that is a zombie, but the spared one.
func (s *supervisor) reap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	self := os.Getpid()
	for _, p := range procs() {
		if p.zombie && p.ppid == self && p.pid != s.spare {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
		}
	}
}

// serve accepts the helpers' hand-overs until l is closed.
func (s *supervisor) serve(l *net.UnixListener) {
	for {
		conn, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go s.handle(conn)
	}
}

// handOver is what run -supervised sends with its stream's descriptors.
type handOver struct {
	Args []string `json:"args"` // run's flags and command
}

// handOverMax bounds a hand-over's JSON: run's flags and a command line.
const handOverMax = 1 << 20

// handle runs the command one helper hands over, and tells it once the
// status is written, or why not.
func (s *supervisor) handle(conn *net.UnixConn) {
	defer conn.Close()
	answer := func(msg string) { _, _ = conn.Write([]byte(msg + "\n")) }
	// Read before the peer is checked: a socket closed on what it has
	// not read resets, and the helper would not read why.
	buf := make([]byte, handOverMax)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	files, ferr := receivedFiles(oob[:oobn])
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var h handOver
	if err := fromOutside(conn); err != nil {
		answer("refused: " + err.Error())
		return
	}
	switch {
	case err != nil:
		answer("refused: " + err.Error())
		return
	case ferr != nil:
		answer("refused: " + ferr.Error())
		return
	case len(files) != 2:
		answer("refused: a hand-over carries the stream's input and output")
		return
	case json.Unmarshal(buf[:n], &h) != nil:
		answer("refused: a hand-over that is not JSON")
		return
	}
	o, err := parseRun(h.Args, io.Discard)
	if err != nil {
		answer("refused: " + err.Error())
		return
	}
	s.mu.Lock()
	busy := s.busy
	s.busy = true
	s.mu.Unlock()
	if busy {
		answer("refused: a command is running")
		return
	}
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
	}()
	fw := newFrameWriter(files[1], true)
	st := runCommand(o, files[0], fw, s)
	// A stream gone by now has nobody to tell.
	if fw.json(FrameStatus, st) == nil {
		_ = fw.flush()
	}
	// The stream ends with the main process's copies of it, now, and the
	// helper's, once it has read this.
	for _, f := range files {
		f.Close()
	}
	files = nil
	answer("")
}

// fromOutside refuses any peer but a process exec'd into the container
// from outside its PID namespace, whose parent is therefore none it
// knows: the session's code, whatever it starts, has a parent inside
// (the command, or this process once orphaned), and a process of another
// container or pod has no pid here at all.
func fromOutside(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return credErr
	}
	if cred.Pid == 0 || int(cred.Uid) != os.Getuid() {
		return errors.New("not a process of this container")
	}
	p, ok := readProc(int(cred.Pid))
	if !ok || p.ppid != 0 {
		return errors.New("not a process exec'd into the container")
	}
	return nil
}

// receivedFiles are the descriptors of a hand-over's control message.
// (A control message carries no more than its buffer holds: the kernel
// closes the rest and marks the message truncated.)
func receivedFiles(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			// Non-blocking, so the runtime's poller has it and Close
			// ends a read still waiting on the input.
			_ = unix.SetNonblock(fd, true)
			files = append(files, os.NewFile(uintptr(fd), "stream"))
		}
	}
	return files, nil
}

// runSupervised hands this helper's input and output to the container's
// main process, which runs the command on them, and returns once it says
// the command's status is written. Killed meanwhile (the command's
// kill -9 -1), it leaves the answer to the main process.
func runSupervised(args []string) error {
	name, err := supervisorSocket()
	if err != nil {
		return err
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return fmt.Errorf("inpod: run: the container's main process: %w", err)
	}
	defer conn.Close()
	msg, err := json.Marshal(handOver{Args: args})
	if err != nil {
		return err
	}
	rights := unix.UnixRights(int(os.Stdin.Fd()), int(os.Stdout.Fd()))
	if _, _, err := conn.WriteMsgUnix(msg, rights, nil); err != nil {
		return fmt.Errorf("inpod: run: hand over: %w", err)
	}
	reply, err := io.ReadAll(io.LimitReader(conn, 4<<10))
	if err != nil {
		return fmt.Errorf("inpod: run: the main process's answer: %w", err)
	}
	if msg := strings.TrimSpace(string(reply)); msg != "" || len(reply) == 0 {
		return fmt.Errorf("inpod: run: the container's main process: %q", msg)
	}
	return nil
}

// catchable is every signal the supervisor takes itself, so that none
// the commands send it ends it: all but those no process can catch and
// those the Go runtime handles harmlessly itself (preemption, profiling).
// Sent by kill, SIGSEGV and its kind would otherwise crash it as a fault.
func catchable() []os.Signal {
	var out []os.Signal
	for sig := syscall.Signal(1); sig < 32; sig++ {
		switch sig {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGURG, syscall.SIGPROF:
		default:
			out = append(out, sig)
		}
	}
	return out
}
