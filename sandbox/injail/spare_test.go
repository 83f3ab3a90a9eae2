//go:build linux

package injail

import (
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A spare receives its command's stdout and stderr though signals come
// while it waits for them: a receive with a read wait is never resumed
// after a signal, and an interrupted one ended the spare before its
// command came.
func TestSpareReceivesItsStdioThroughSignals(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := os.NewFile(uintptr(fds[0]), "spare")
	defer ch.Close()
	defer unix.Close(fds[1])
	caught := make(chan os.Signal, 64)
	signal.Notify(caught, syscall.SIGUSR1)
	defer signal.Stop(caught)

	reader, got := make(chan int, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		reader <- unix.Gettid()
		got <- receiveStdio(ch)
	}()
	tid := <-reader
	for range 20 {
		if err := unix.Tgkill(os.Getpid(), tid, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case err := <-got:
		t.Fatalf("the spare's wait ended before its stdio came: %v", err)
	default:
	}
	// The test's own stdout and stderr, so that taking them as fds 1 and
	// 2 changes nothing here.
	out, err := unix.Dup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(out)
	errOut, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(errOut)
	if err := unix.Sendmsg(fds[1], []byte{0}, unix.UnixRights(out, errOut), nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the spare's stdio: %v", err)
	}
}
