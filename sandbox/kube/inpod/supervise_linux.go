//go:build linux

package inpod

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

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
// frames and status there itself. containerd keeps an exec stream open
// while any process holds its output (a background process holds
// `kubectl exec` so), so the answer arrives even when the command has
// ended the helper; kube_e2e checks a cluster's runtime does.

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
	mu    sync.Mutex // held across a command's start, so reap sees its pid spared
	spare int        // the running command's main process, while it has not been waited for
	busy  bool

	heldMu sync.Mutex
	held   []heldBlob // changes' sections from earlier captures, the latest last
}

// heldBlob is a section of changes' input, named by its digest.
type heldBlob struct {
	digest string
	b      []byte
}

// What the supervisor holds of changes' input between captures: the
// manifest and the known files of the latest, within heldMax bytes. It
// sits in the commands' container's memory, which its limit counts.
const (
	heldCount = 2
	heldMax   = 64 << 20
)

// hold keeps b under digest, letting the oldest go past the bounds.
func (s *supervisor) hold(digest string, b []byte) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	s.held = slices.DeleteFunc(s.held, func(h heldBlob) bool { return h.digest == digest })
	s.held = append(s.held, heldBlob{digest, b})
	total := 0
	for _, h := range s.held {
		total += len(h.b)
	}
	for len(s.held) > heldCount || total > heldMax {
		total -= len(s.held[0].b)
		s.held = slices.Delete(s.held, 0, 1) // which lets go of its bytes, as [1:] would not
	}
}

// holding is what is held under digest, or nil.
func (s *supervisor) holding(digest string) []byte {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for _, h := range s.held {
		if h.digest == digest {
			return h.b
		}
	}
	return nil
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

// listenSupervisor is the supervisor's socket, listening. (Through
// x/sys, not package net: the helper runs from an init, and importing net
// would let packages of the server set up before it.)
func listenSupervisor() (int, error) {
	name, err := supervisorSocket()
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("inpod: idle: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("inpod: idle: listen for commands on %s: %w", name, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("inpod: idle: listen for commands: %w", err)
	}
	return fd, nil
}

// refusers bounds the refusals that say why at once: the session's
// processes may connect too (a shell's, whenever it likes), and each such
// connection is read for at most refusalWait before it is told. Past
// them, one is closed unread. A hand-over from the server's helper is
// read for at most handOverWait.
const (
	refusers     = 4
	refusalWait  = 200 * time.Millisecond
	handOverWait = 2 * time.Second
)

// serve accepts connections on the listening socket lfd: the helpers'
// hand-overs each in a goroutine of its own (the server sends one at a
// time), anyone else's refused without holding up the next.
func (s *supervisor) serve(lfd int) {
	refusing := make(chan struct{}, refusers)
	for {
		fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EBADF) || errors.Is(err, unix.EINVAL) {
				return
			}
			continue
		}
		if err := fromOutside(fd); err != nil {
			select {
			case refusing <- struct{}{}:
				go func() {
					defer func() { <-refusing }()
					refuse(fd, err)
				}()
			default:
				unix.Close(fd)
			}
			continue
		}
		go s.handle(fd)
	}
}

// refuse tells a peer why it is refused, once it has read what it sent
// (a socket closed on what it has not read resets, and the peer would
// not read why), within refusalWait.
func refuse(fd int, why error) {
	defer unix.Close(fd)
	setReadWait(fd, refusalWait)
	_, files, _ := readHandOver(fd)
	for _, f := range files {
		f.Close()
	}
	_, _ = unix.Write(fd, []byte("refused: "+why.Error()+"\n"))
}

// setReadWait bounds each read from the socket fd.
func setReadWait(fd int, d time.Duration) {
	tv := unix.NsecToTimeval(int64(d))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// handOver is what an exec'd helper sends the main process, after its
// 4-byte length: run -supervised with its stream's descriptors, changes
// to hold or fetch a section of its input.
type handOver struct {
	// Op is "run" (or empty): Args are run's flags and command, and the
	// stream's descriptors come with it. "hold": a section of changes'
	// input follows, to keep under Digest. "held": the answer is what
	// is kept under Digest.
	Op     string   `json:"op,omitempty"`
	Args   []string `json:"args,omitempty"`
	Digest string   `json:"digest,omitempty"`
}

// handOverMax bounds a hand-over's JSON: run's flags and a command line.
const handOverMax = 1 << 20

// handle serves one helper exec'd by the server on connection fd: it
// runs the command handed over and tells the helper once the status is
// written (or why not), or holds or answers a section of changes' input.
func (s *supervisor) handle(fd int) {
	defer unix.Close(fd)
	answer := func(msg string) { _, _ = unix.Write(fd, []byte(msg+"\n")) }
	setReadWait(fd, handOverWait)
	msg, files, err := readHandOver(fd)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var h handOver
	switch {
	case err != nil:
		answer("refused: " + err.Error())
		return
	case json.Unmarshal(msg, &h) != nil:
		answer("refused: a hand-over that is not JSON")
		return
	case h.Op == "hold" && len(files) == 0:
		b, err := readBlob(fd, heldMax)
		if err != nil {
			answer("refused: " + err.Error())
			return
		}
		s.hold(h.Digest, b)
		answer("")
		return
	case h.Op == "held" && len(files) == 0:
		_ = writeBlob(fd, s.holding(h.Digest))
		return
	case h.Op != "" && h.Op != "run" || len(files) != 2:
		answer("refused: a hand-over carries the stream's input and output")
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

// readHandOver reads a hand-over: its length and the descriptors that
// come with it, then its JSON, within handOverMax.
func readHandOver(fd int) ([]byte, []*os.File, error) {
	head := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, err := recvmsg(fd, head, oob)
	if err != nil {
		return nil, nil, err
	}
	files, err := receivedFiles(oob[:oobn])
	if err != nil {
		return nil, files, err
	}
	if err := readExactly(fd, head[n:]); err != nil {
		return nil, files, err
	}
	size := binary.BigEndian.Uint32(head)
	if size > handOverMax {
		return nil, files, fmt.Errorf("a hand-over of %d bytes", size)
	}
	msg := make([]byte, size)
	return msg, files, readExactly(fd, msg)
}

// recvmsg receives into b and oob from the socket fd. A socket with a
// read wait (setReadWait) is never resumed after a signal, and this
// process takes every signal, the children's ends among them: an
// interrupted receive is asked again.
func recvmsg(fd int, b, oob []byte) (n, oobn int, err error) {
	for {
		n, oobn, _, _, err = unix.Recvmsg(fd, b, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			return n, oobn, err
		}
	}
}

// readExactly fills b from the socket fd.
func readExactly(fd int, b []byte) error {
	n, err := readFull(fd, b)
	if err == nil && n < len(b) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readBlob reads a 4-byte length and that many bytes, at most max.
func readBlob(fd, max int) ([]byte, error) {
	head := make([]byte, 4)
	if err := readExactly(fd, head); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(head)
	if int64(size) > int64(max) {
		return nil, fmt.Errorf("a section of %d bytes", size)
	}
	b := make([]byte, size)
	return b, readExactly(fd, b)
}

// writeBlob writes b after its 4-byte length.
func writeBlob(fd int, b []byte) error {
	return writeAll(fd, append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
}

// writeAll writes b to the socket fd.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// fromOutside refuses any peer but a process exec'd into the container
// from outside its PID namespace, whose parent is therefore none it
// knows: the session's code, whatever it starts, has a parent inside
// (the command, or this process once orphaned), and a process of another
// container or pod has no pid here at all.
func fromOutside(fd int) error {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return err
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
	fd, err := handTo(handOver{Args: args}, int(os.Stdin.Fd()), int(os.Stdout.Fd()))
	if err != nil {
		return fmt.Errorf("inpod: run: %w", err)
	}
	defer unix.Close(fd)
	return readAnswer(fd)
}

// handTo connects to the container's main process and sends it h with
// the descriptors fds, answering the connection.
func handTo(h handOver, fds ...int) (int, error) {
	name, err := supervisorSocket()
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("the container's main process: %w", err)
	}
	msg, err := json.Marshal(h)
	if err == nil {
		var rights []byte
		if len(fds) > 0 {
			rights = unix.UnixRights(fds...)
		}
		err = unix.Sendmsg(fd, binary.BigEndian.AppendUint32(nil, uint32(len(msg))), rights, nil, 0)
	}
	if err == nil {
		err = writeAll(fd, msg)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("hand over: %w", err)
	}
	return fd, nil
}

// heldSection is the section of changes' input the container's main
// process holds under digest, or nil (none held, or no main process
// that holds any).
func heldSection(digest string) []byte {
	if digest == "" {
		return nil
	}
	fd, err := handTo(handOver{Op: "held", Digest: digest})
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	b, err := readBlob(fd, heldMax)
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// holdSection hands the container's main process b to hold under digest
// for the next capture, if it will.
func holdSection(digest string, b []byte) {
	fd, err := handTo(handOver{Op: "hold", Digest: digest})
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if writeBlob(fd, b) == nil {
		_ = readAnswer(fd)
	}
}

// readAnswer reads the main process's answer line: nil for an empty one.
func readAnswer(fd int) error {
	var reply []byte
	buf := make([]byte, 512)
	for len(reply) < 4<<10 {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("inpod: run: the main process's answer: %w", err)
		}
		if n == 0 {
			break
		}
		reply = append(reply, buf[:n]...)
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
