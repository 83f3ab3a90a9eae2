// Package hostpty is a PTY of this host as a shell's terminal stream: its
// master end non-blocking and driven by the runtime poller, so reads take
// deadlines and Close stops a reader, and its slave end for the shell.
// The terminal package drives shells through it, and so does the local
// sandbox provider.
package hostpty

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Master is a PTY's master end.
type Master struct {
	f      *os.File
	closed atomic.Bool
	raw    interface {
		Write(func(fd uintptr) bool) error
	}
}

// Open makes a PTY with a window of cols×rows whose slave end belongs to
// uid and gid (mode 0620, so the shell's user can reopen /dev/tty; -1
// keeps pty.Open's owner, the server's). The caller hands the slave to the
// shell as its stdin, stdout, stderr and controlling terminal, then closes
// its own copy. Every failure closes both ends.
func Open(cols, rows, uid, gid int) (*Master, *os.File, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("hostpty: open a pty: %w", err)
	}
	// pty.Open leaves the master in blocking mode (its ioctls go through
	// Fd). A blocking read cannot be interrupted: neither a deadline nor
	// Close would stop the reader. So take a non-blocking duplicate, which
	// os.NewFile registers with the poller.
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	master.Close()
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("hostpty: duplicate the pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		tty.Close()
		return nil, nil, fmt.Errorf("hostpty: pty master: %w", err)
	}
	m := &Master{f: os.NewFile(uintptr(fd), "/dev/ptmx")}
	if m.raw, err = m.f.SyscallConn(); err != nil {
		m.f.Close()
		tty.Close()
		return nil, nil, fmt.Errorf("hostpty: pty master: %w", err)
	}
	fail := func(err error) (*Master, *os.File, error) {
		m.f.Close()
		tty.Close()
		return nil, nil, err
	}
	if err := m.Resize(cols, rows); err != nil {
		return fail(err)
	}
	if uid != -1 || gid != -1 {
		if err := tty.Chown(uid, gid); err != nil {
			return fail(fmt.Errorf("hostpty: give the pty to the shell's user: %w", err))
		}
	}
	if err := tty.Chmod(0o620); err != nil {
		return fail(fmt.Errorf("hostpty: pty mode: %w", err))
	}
	// The shell must get a blocking descriptor; Fd makes it so whatever the
	// starter does with the file.
	tty.Fd()
	return m, tty, nil
}

func (m *Master) Read(p []byte) (int, error)        { return m.f.Read(p) }
func (m *Master) SetReadDeadline(t time.Time) error { return m.f.SetReadDeadline(t) }
func (m *Master) Write(p []byte) (int, error)       { return m.f.Write(p) }

func (m *Master) Close() error {
	m.closed.Store(true)
	return m.f.Close()
}

// TryWrite is one write that never waits for room: it answers how much
// the PTY took, 0 when it is full or gone (a writer then meets the same
// and deals with it).
func (m *Master) TryWrite(p []byte) int {
	n := 0
	_ = m.raw.Write(func(fd uintptr) bool {
		n, _ = unix.Write(int(fd), p)
		return true
	})
	return max(n, 0)
}

// Resize sets the window size through the poller's descriptor
// (pty.Setsize would call Fd and put the master back in blocking mode);
// the shell's foreground job gets SIGWINCH. Once the master is closed the
// error wraps os.ErrClosed.
func (m *Master) Resize(cols, rows int) error {
	sc, err := m.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("hostpty: resize: %w", err)
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if err == nil {
		err = ierr
	}
	switch {
	case err != nil && m.closed.Load():
		return fmt.Errorf("hostpty: resize: %w", os.ErrClosed)
	case err != nil:
		return fmt.Errorf("hostpty: resize: %w", err)
	}
	return nil
}
