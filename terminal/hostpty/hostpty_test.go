package hostpty

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The PTY has the size asked for, follows a resize, carries the shell's output,
// times a read out, never blocks a TryWrite once nobody reads, and answers os.ErrClosed
// once closed.
func TestMasterAndSlave(t *testing.T) {
	m, tty, err := Open(100, 30, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	size := func() (int, int) {
		ws, err := unix.IoctlGetWinsize(int(tty.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			t.Fatal(err)
		}
		return int(ws.Col), int(ws.Row)
	}
	if c, r := size(); c != 100 || r != 30 {
		t.Fatalf("opened at %d×%d, want 100×30", c, r)
	}
	if err := m.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if c, r := size(); c != 120 || r != 40 {
		t.Fatalf("resized to %d×%d, want 120×40", c, r)
	}
	buf := make([]byte, 64)
	m.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := m.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read with nothing to read, past its deadline: %v", err)
	}
	if _, err := tty.Write([]byte("out\n")); err != nil {
		t.Fatal(err)
	}
	m.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := m.Read(buf); err != nil || string(buf[:n]) != "out\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	// Nobody reads the slave: TryWrite fills the PTY and then takes 0
	// at once instead of waiting.
	chunk := make([]byte, 1024)
	deadline := time.Now().Add(5 * time.Second)
	for m.TryWrite(chunk) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the PTY never filled")
		}
	}
	m.Close()
	if err := m.Resize(80, 24); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Resize after Close: %v", err)
	}
}

// The slave is given to the shell's user with mode 0620.
func TestSlaveOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: giving the tty to another user (chown) needs root")
	}
	m, tty, err := Open(80, 24, 1234, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer tty.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(tty.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1234 || st.Gid != 5 || st.Mode&0o777 != 0o620 {
		t.Fatalf("the slave is %d:%d %o, want 1234:5 620", st.Uid, st.Gid, st.Mode&0o777)
	}
}
