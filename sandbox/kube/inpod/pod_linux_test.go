//go:build linux

package inpod

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillall runs killall in a PID namespace of its own, where it cannot
// reach the tests' processes: a shell is PID 1 there, and starts a child
// in the background, an orphan and one in a session of its own, all as
// a user other than root, as in a pod (killall refuses to run as root).
func TestKillall(t *testing.T) {
	if err := exec.Command("unshare", "-pf", "--mount-proc", "true").Run(); err != nil {
		t.Skipf("precondition: a PID namespace of its own (unshare -p needs root or user namespaces): %v", err)
	}
	// Outside t.TempDir, whose parent only root may enter.
	dir, err := os.MkdirTemp("", "killall-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	script := `sleep 100 & (sleep 100 &); setsid sleep 100 & sleep 0.2
"$0" killall > "$1/status"
for f in /proc/[0-9]*/stat; do read -r line < "$f" && echo "$line"; done > "$1/procs"`
	// A copy of this binary the other user may run: go test's own
	// folder is root's alone.
	helper := filepath.Join(dir, "helper")
	if err := copyFile(os.Args[0], helper); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-pf", "--mount-proc", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"sh", "-c", "set -e\n"+script, helper, dir)
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		t.Fatal(err)
	}
	f := readFrames(t, bytes.NewReader(b))
	var st KillStatus
	f.decodeStatus(t, &st)
	if st.Left != 0 {
		t.Errorf("status %+v", st)
	}
	procs, err := os.ReadFile(filepath.Join(dir, "procs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(procs)), "\n") {
		fields := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
		if !strings.HasPrefix(line, "1 ") && fields[0] != "Z" {
			t.Errorf("alive after killall: %s", line)
		}
	}
}

func TestIdleEndsAtSIGTERM(t *testing.T) {
	cmd := exec.Command(os.Args[0], "idle")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0")
	logged, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Its first line says it catches SIGTERM: before, the signal would end
	// it as any Go program.
	line, err := bufio.NewReader(logged).ReadString('\n')
	if err != nil || !strings.Contains(line, "idle") {
		t.Fatalf("idle's first line: %q %v", line, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("idle: %v", err)
		}
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Error("idle did not end at SIGTERM")
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
