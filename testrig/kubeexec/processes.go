package kubeexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Processes is a container runtime whose containers are folders of this
// machine: Exec runs the command as a local process in the container's
// folder, on pipes or, for a TTY, on a pseudo-terminal.
type Processes struct {
	// Dir is the folder that stands for the container; an error answers
	// the exec with it, as a runtime answers for a container it lacks.
	Dir func(containerID string) (string, error)
	// Env is the commands' environment; nil gives a PATH alone, as a bare
	// image's container has little more.
	Env []string
	// Workspace, when set, is where a container's folder is seen, as a
	// pod's volume is mounted: each command runs in a mount namespace of
	// its own with Dir's folder bound there, and starts in it.
	Workspace string
	// UID, when set, is the user and group a container's commands run
	// as, with no other group, as a pod's securityContext says.
	UID func(containerID string) (uint32, error)
	// PIDNamespaces, when set, gives each container a PID namespace of
	// its own that its commands share, with /proc showing it, as the
	// containers of a pod have (they share its volumes and network, not
	// their processes): a command's kill -1 reaches its container's
	// processes alone. Close ends them.
	PIDNamespaces bool
	// Init is the command that is each such namespace's 1, as the
	// container's main process is, run as its commands are (its user, its
	// workspace, its environment): what reaps the orphans that come to it
	// and, in a sandbox pod, runs the commands handed to it. nil: sleep,
	// which reaps none (they stay zombies).
	Init func(containerID string) []string

	sent, received atomic.Int64 // see Sent and Received

	mu      sync.Mutex
	holders map[string]*os.Process // by container: the 1 of its PID namespace
}

// Close ends the containers' PID namespaces and every process in them.
func (p *Processes) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, h := range p.holders {
		_ = h.Kill()
		delete(p.holders, id)
	}
}

// holder is the host pid of the process that holds the container's PID
// namespace, started with its first command.
func (p *Processes) holder(containerID, dir string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.holders[containerID]; ok {
		return h.Pid, nil
	}
	argv := []string{"sleep", "infinity"}
	if p.Init != nil {
		argv = p.Init(containerID)
	}
	argv, err := p.confine(containerID, dir, argv)
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, p.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("kubeexec: a PID namespace for %s: %w", containerID, err)
	}
	go func() { _ = cmd.Wait() }() // once Close kills it
	if p.holders == nil {
		p.holders = map[string]*os.Process{}
	}
	p.holders[containerID] = cmd.Process
	return cmd.Process.Pid, nil
}

// Sent is how many bytes the commands have written to their exec streams'
// stdout and stderr (not a TTY's): what crossed from the pods.
func (p *Processes) Sent() int64 { return p.sent.Load() }

// Received is how many bytes the commands have read from their exec
// streams' stdin (not a TTY's): what crossed into the pods.
func (p *Processes) Received() int64 { return p.received.Load() }

// countedReader adds what passes through to n.
type countedReader struct {
	io.Reader
	n *atomic.Int64
}

func (c countedReader) Read(b []byte) (int, error) {
	k, err := c.Reader.Read(b)
	c.n.Add(int64(k))
	return k, err
}

// counted adds what passes through to n.
type counted struct {
	io.WriteCloser
	n *atomic.Int64
}

func (c counted) Write(b []byte) (int, error) {
	k, err := c.WriteCloser.Write(b)
	c.n.Add(int64(k))
	return k, err
}

var _ streaming.Runtime = (*Processes)(nil)

// drain bounds how long a terminal's output is still read once its
// command has ended: what a background process keeps writing would
// otherwise hold the exec open.
const drain = 2 * time.Second

// pipesHeld bounds how long a command's piped output is still read once
// it has ended. A container runtime reads it until every process that
// holds it has closed it (the background process that keeps `kubectl
// exec` waiting), and so does the rig, within a bound that only keeps a
// broken test from hanging.
const pipesHeld = 5 * time.Minute

// Exec runs cmd in the container's folder until it ends or ctx does; ctx
// ending (the client went away) kills the command's process group. A
// command that exits non-zero answers an error whose ExitStatus the
// streaming server sends the client as the exit code.
func (p *Processes) Exec(ctx context.Context, containerID string, argv []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if len(argv) == 0 {
		return errors.New("kubeexec: no command")
	}
	dir, err := p.Dir(containerID)
	if err != nil {
		return fmt.Errorf("kubeexec: container %s: %w", containerID, err)
	}
	if argv, err = p.contain(containerID, dir, argv); err != nil {
		return fmt.Errorf("kubeexec: container %s: %w", containerID, err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, p.env()
	// The command's children are in its group (its session, on a TTY), so
	// ending the group ends what the command started too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = pipesHeld
	if tty {
		cmd.WaitDelay = drain
		err = runTTY(cmd, in, out, resize)
	} else {
		if out != nil {
			out = counted{out, &p.sent}
		}
		if errOut != nil {
			errOut = counted{errOut, &p.sent}
		}
		if in != nil {
			in = countedReader{in, &p.received}
		}
		err = runPiped(cmd, in, out, errOut)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kubeexec: %s: %w", argv[0], ctx.Err())
	}
	return exitError(err, tty, out, errOut)
}

// env is the commands' environment.
func (p *Processes) env() []string {
	if p.Env == nil {
		return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	return p.Env
}

// contain wraps argv in what Workspace, UID and PIDNamespaces ask for:
// util-linux's nsenter (which forks into the PID namespace and waits)
// around confine's.
func (p *Processes) contain(containerID, dir string, argv []string) ([]string, error) {
	argv, err := p.confine(containerID, dir, argv)
	if err != nil || !p.PIDNamespaces {
		return argv, err
	}
	pid, err := p.holder(containerID, dir)
	if err != nil {
		return nil, err
	}
	return append([]string{"nsenter", "--target", strconv.Itoa(pid), "--pid", "--"}, argv...), nil
}

// confine wraps argv in unshare and setpriv, each of which execs the
// next, so the command keeps the process group (or session) it starts
// with: a mount namespace of its own with the container's /proc and its
// folder at Workspace, and the container's user.
func (p *Processes) confine(containerID, dir string, argv []string) ([]string, error) {
	if p.UID != nil {
		uid, err := p.UID(containerID)
		if err != nil {
			return nil, err
		}
		id := strconv.FormatUint(uint64(uid), 10)
		argv = append([]string{"setpriv", "--reuid=" + id, "--regid=" + id, "--clear-groups", "--"}, argv...)
	}
	var steps []string
	if p.PIDNamespaces {
		steps = append(steps, "mount -t proc proc /proc")
	}
	if p.Workspace != "" {
		// The shell's cd would pass the rig's own folder on in OLDPWD: a
		// container starts with its pod's environment alone.
		steps = append(steps, `mount --bind -- "$1" "$2" && cd "$2" && unset OLDPWD`)
	}
	if len(steps) > 0 {
		script := strings.Join(steps, " && ") + ` && shift 2 && exec "$@"`
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", dir, p.Workspace}, argv...)
	}
	return argv, nil
}

// runPiped runs cmd with its own pipes.
func runPiped(cmd *exec.Cmd, in io.Reader, out, errOut io.WriteCloser) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out != nil {
		cmd.Stdout = out
	}
	if errOut != nil {
		cmd.Stderr = errOut
	}
	var stdin io.WriteCloser
	if in != nil {
		// Not cmd.Stdin: Wait would wait for in's end, which a WebSocket
		// v4 client never sends; the copy below ends instead when the
		// stream is closed after the command.
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return fmt.Errorf("kubeexec: stdin: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	return cmd.Wait()
}

// runTTY runs cmd as a session leader on a new pseudo-terminal, its
// controlling terminal, as a container runtime's exec -t does.
func runTTY(cmd *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	term, err := pty.StartWithAttrs(cmd, nil, cmd.SysProcAttr)
	if err != nil {
		return err
	}
	// The sizes stop before the terminal closes: Setsize reads its
	// descriptor, which Close takes away.
	ended, sized := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sized)
		followSizes(term, resize, ended)
	}()
	defer func() {
		close(ended)
		<-sized
		term.Close()
	}()
	if in != nil {
		go func() { _, _ = io.Copy(term, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if out == nil {
			out = io.Discard
		}
		// Ends with EIO once every holder of the terminal's other end has
		// closed it and what they wrote has been read.
		_, _ = io.Copy(out, term)
	}()
	err = cmd.Wait()
	select {
	case <-copied:
	case <-time.After(drain):
		_ = term.Close()
		<-copied
	}
	return err
}

// followSizes sets the terminal's size to each one the client sends until
// the command ends.
func followSizes(term *os.File, resize <-chan remotecommand.TerminalSize, ended <-chan struct{}) {
	for {
		select {
		case <-ended:
			return
		case size, ok := <-resize:
			if !ok {
				return
			}
			_ = pty.Setsize(term, &pty.Winsize{Cols: size.Width, Rows: size.Height})
		}
	}
}

// exitError turns how the command ended into what the streaming server
// reports: an ExitError for an exit code, the error itself otherwise.
// Like a container runtime, it answers a command it could not start with
// 127 (not found) or 126 and says why on the command's error output.
func exitError(err error, tty bool, out, errOut io.Writer) error {
	if err == nil {
		return nil
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		ws, ok := exitErr.Sys().(syscall.WaitStatus)
		switch {
		case ok && ws.Signaled():
			return utilexec.CodeExitError{Err: err, Code: 128 + int(ws.Signal())}
		case ok && ws.Exited():
			return utilexec.CodeExitError{Err: err, Code: ws.ExitStatus()}
		}
		return fmt.Errorf("kubeexec: %w", err)
	}
	say := errOut
	if tty || say == nil {
		say = out
	}
	if say != nil {
		_, _ = fmt.Fprintf(say, "kubeexec: exec failed: %v\n", err)
	}
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = 127
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// Attach is not offered: sandbox pods are reached by exec alone.
func (p *Processes) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return errors.New("kubeexec: attach is not offered")
}

// PortForward is not offered: sandbox pods are reached by exec alone.
func (p *Processes) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	return errors.New("kubeexec: port forwarding is not offered")
}
