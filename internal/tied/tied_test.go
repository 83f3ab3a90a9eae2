package tied

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Children started by Start from goroutines that end their threads right
// after (each locks its thread and returns) live on, and their exits are
// reported.
func TestChildrenOutliveTheirStartersThreads(t *testing.T) {
	const children = 10
	exited := make(chan error, children)
	cmds := make([]*exec.Cmd, children)
	for i := range cmds {
		cmd := exec.Command("sleep", "30")
		cmds[i] = cmd
		started := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // this thread ends when the goroutine returns
			started <- Start(cmd, syscall.SIGKILL, func(err error) { exited <- err })
		}()
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
	}
	select {
	case err := <-exited:
		t.Fatalf("a child died with the thread of the goroutine that started it: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	for _, cmd := range cmds {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Fatal("a child's exit was not reported")
		}
	}
}

// A command that cannot start says so, and nothing waits for it.
func TestStartFailure(t *testing.T) {
	err := Start(exec.Command("/nonexistent/binary"), syscall.SIGKILL, func(error) { t.Error("exited called for a command that never started") })
	if err == nil {
		t.Fatal("no error for a missing binary")
	}
}
