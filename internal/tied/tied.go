// Package tied starts child processes that die with this one.
//
// Linux sends a child its parent-death signal (Pdeathsig) when the thread
// that started it ends, not the process. Go keeps its threads for the life
// of the process, except one whose goroutine returns while it holds the
// thread locked (runtime.LockOSThread): that thread ends with it. Any
// goroutine may run on any thread, so a child started from an ordinary
// goroutine dies whenever some unrelated code ends a locked thread that
// happens to be the one its start ran on. Start runs the start, and the
// wait, on a thread held for the child alone.
package tied

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd with sig as its parent-death signal, from an OS thread
// that stays held until cmd has exited, and calls exited with cmd.Wait's
// error then (on that goroutine).
func Start(cmd *exec.Cmd, sig syscall.Signal, exited func(error)) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the child is gone: the thread must outlive it.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
