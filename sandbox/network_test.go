//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
)

// hostListener listens on the host at addr, greets each connection with
// "hello" and counts them.
type hostListener struct {
	ln       net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
}

func listen(t *testing.T, addr string) *hostListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln)
}

// serve greets and counts the connections to ln until the test ends.
func serve(t *testing.T, ln net.Listener) *hostListener {
	h := &hostListener{ln: ln}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); h.wg.Wait() })
	return h
}

// connect is a script that connects to l's address with bash's /dev/tcp
// and prints what it is sent.
func (h *hostListener) connect() string {
	a := h.ln.Addr().(*net.TCPAddr)
	return fmt.Sprintf("timeout 10 cat </dev/tcp/%s/%d", a.IP, a.Port)
}

// hostIP is one of the host's own addresses that is not loopback, if any.
func hostIP(t *testing.T) net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

func (s *session) runNet(t *testing.T, network sandbox.Network, script string) *sandbox.Result {
	t.Helper()
	spec := s.spec(script)
	spec.Network = network
	res, err := s.sb.Run(context.Background(), spec, sandbox.Limits{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("%s %q: %v", network, script, err)
	}
	return res
}

func TestNetworkDeny(t *testing.T) {
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	local := listen(t, "127.0.0.1:0")
	if res := s.runNet(t, sandbox.Deny, local.connect()); res.ExitCode == 0 || local.accepted.Load() != 0 {
		t.Errorf("deny reached the host's 127.0.0.1: exit %d, %q", res.ExitCode, res.Stdout)
	}
	// The empty Network is deny too.
	if res := s.runNet(t, "", local.connect()); res.ExitCode == 0 || local.accepted.Load() != 0 {
		t.Errorf("the default network reached the host's 127.0.0.1: exit %d", res.ExitCode)
	}

	if ip := hostIP(t); ip == nil {
		t.Log("the host has no non-loopback IPv4 address; that case is not checked")
	} else {
		remote := listen(t, net.JoinHostPort(ip.String(), "0"))
		if res := s.runNet(t, sandbox.Deny, remote.connect()); res.ExitCode == 0 || remote.accepted.Load() != 0 {
			t.Errorf("deny reached the host's %s: exit %d", ip, res.ExitCode)
		}
		// Allow is the internet, not the host (egress_test.go).
		if res := s.runNet(t, sandbox.Allow, remote.connect()); res.ExitCode == 0 || remote.accepted.Load() != 0 {
			t.Errorf("allow reached the host's %s: exit %d %q %s", ip, res.ExitCode, res.Stdout, res.Stderr)
		}
	}

	// A server the command starts on loopback answers the same command: lo
	// is up in its namespace. python3 is the listener (bash cannot listen),
	// bash's /dev/tcp the client.
	res := s.runNet(t, sandbox.Deny, `
		python3 -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8123))
s.listen(1)
c, _ = s.accept()
c.sendall(b"pong\n")
c.close()' &
		for i in $(seq 200); do
			if out=$(cat </dev/tcp/127.0.0.1/8123 2>/dev/null); then echo "$out"; exit 0; fi
			sleep 0.05
		done
		exit 1`)
	if res.ExitCode != 0 || string(res.Stdout) != "pong\n" {
		t.Errorf("loopback server inside deny: exit %d %q %s", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestNetworkAllow: allow has a loopback of its own, like deny, and the
// host's 127.0.0.1 is not on it.
func TestNetworkAllow(t *testing.T) {
	needTools(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	local := listen(t, "127.0.0.1:0")
	res := s.runNet(t, sandbox.Allow, local.connect())
	if res.ExitCode == 0 || local.accepted.Load() != 0 {
		t.Errorf("allow reached the host's 127.0.0.1: exit %d %q %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = s.runNet(t, sandbox.Allow, `
		python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 8124))
s.listen(1)
c, _ = s.accept()
c.sendall(b"pong\n")
c.close()' &
		for i in $(seq 200); do
			if out=$(cat </dev/tcp/127.0.0.1/8124 2>/dev/null); then echo "$out"; exit 0; fi
			sleep 0.05
		done
		exit 1`)
	if res.ExitCode != 0 || string(res.Stdout) != "pong\n" {
		t.Errorf("loopback server inside allow: exit %d %q %s", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// TestNetworkDenyUnenforceable runs this test binary again without
// CAP_SYS_ADMIN in its bounding set, where no network namespace and no
// jail can be made: nothing may run, neither deny nor allow, and New says
// so at once.
func TestNetworkDenyUnenforceable(t *testing.T) {
	needRoot(t)
	root := openDir(t)
	uid := nextUID()
	dir := root + "/checkout"
	if err := sandbox.PrepareDir(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=no-sys-admin", "CHILD_DIR="+dir, "CHILD_UID="+strconv.FormatUint(uint64(uid), 10),
		"CHILD_BASE="+strconv.FormatUint(uint64(uidBase), 10))
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil || !strings.HasSuffix(string(out), "ok\n") {
		t.Errorf("child: %v\n%s", err, out)
	}
}

const childEnv = "SANDBOX_TEST_CHILD"

// child is the other side of TestNetworkDenyUnenforceable. The bounding set
// is per thread and a child process inherits the forking thread's, so the
// thread is locked and the commands start from it.
func child() int {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0, 0, 0); err != nil {
		fmt.Println("drop CAP_SYS_ADMIN:", err)
		return 2
	}
	base, _ := strconv.ParseUint(os.Getenv("CHILD_BASE"), 10, 32)
	uid, _ := strconv.ParseUint(os.Getenv("CHILD_UID"), 10, 32)
	sb, err := sandbox.New(sandbox.Config{UIDBase: uint32(base), UIDCount: uidCount})
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer sb.Close()
	if !errors.Is(sb.Unavailable(), sandbox.ErrUnavailable) {
		fmt.Println("New without CAP_SYS_ADMIN did not say the jail is unavailable:", sb.Unavailable())
		return 1
	}
	dir := os.Getenv("CHILD_DIR")
	spec := sandbox.Spec{UID: uint32(uid), GID: uint32(uid), Dir: dir, Home: dir, Argv: bash("echo ran")}
	for _, network := range []sandbox.Network{sandbox.Deny, sandbox.Allow} {
		spec.Network = network
		res, err := sb.Run(context.Background(), spec, sandbox.Limits{})
		if !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, sandbox.ErrStart) || res != nil {
			fmt.Printf("%s without CAP_SYS_ADMIN: %+v, %v\n", network, res, err)
			return 1
		}
		fmt.Println(network, "refused:", err)
	}
	fmt.Println("ok")
	return 0
}
