//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/sandbox"
)

// Addresses the egress tests give to interfaces and namespaces they make
// on this machine. Nothing is ever sent beyond it: each address is checked
// to be local or behind the test's own veth before any command runs.
//
// The test's "internet" is 192.88.99.0/24, the 6to4 relay anycast range
// that RFC 7526 retired and nothing routes: unlike the documentation
// ranges it is not on netblock's list, so it can stand for the internet.
// The host's end of the veth sits on a /29 of it, so the other end is a
// gateway on a network the host is attached to and must stay out of reach;
// the "internet" lies beyond that gateway, on no network of the host's.
const (
	transitHost  = "192.88.99.1"   // the host's end of the veth
	transitPeer  = "192.88.99.2"   // the namespace's end: a gateway next to the host
	outsideAddr  = "192.88.99.200" // the "internet", routed through transitPeer
	privateAddr  = "10.213.77.1"   // on an interface the test adds to the host
	metadataAddr = "169.254.169.254"
)

// reservedAddrs are ranges that are not the internet although no host
// address is in them, routed into the test's "internet" like outsideAddr.
var reservedAddrs = map[string]string{
	"protocol-assignment": "192.0.0.9",
	"documentation":       "198.51.100.1",
	"benchmarking":        "198.18.0.1",
	"reserved":            "240.0.0.1",
}

var netSeq atomic.Int32

// netName is a name for an interface or namespace of this test binary,
// short enough for an interface (15 bytes).
func netName(kind string) string {
	return fmt.Sprintf("at%s%d%d", kind, os.Getpid()%100000, netSeq.Add(1))
}

func needTools(t *testing.T) {
	t.Helper()
	needRoot(t)
	for _, tool := range []string{"ip", "slirp4netns"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("precondition: %s is installed (./test.sh installs slirp4netns; ip is iproute2)", tool)
		}
	}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// routeDev is the interface the host sends dst out of, "lo" for its own
// addresses.
func routeDev(t *testing.T, dst string) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "route", "get", dst).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route get %s: %v\n%s", dst, err, out)
	}
	f := strings.Fields(string(out))
	for i := range f {
		if f[i] == "dev" && i+1 < len(f) {
			return f[i+1]
		}
	}
	t.Fatalf("ip route get %s: no dev in %q", dst, out)
	return ""
}

// testNet is what the egress tests listen on: an outside listener in a
// namespace standing for the internet, and listeners the host reaches but
// the internet must not.
type testNet struct {
	outside                     *hostListener
	loopback, private, metadata *hostListener
	targets                     []target
}

// target is an address a command tries, the listener there, and whether
// Allow may reach it.
type target struct {
	name, addr string
	l          *hostListener
	allow      bool
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	needTools(t)
	n := &testNet{}

	// The "internet": a namespace of its own behind a veth pair, reached
	// through the namespace's end as a gateway.
	ns := netName("o")
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	hostEnd, outEnd := netName("h"), netName("x")
	ipCmd(t, "link", "add", hostEnd, "type", "veth", "peer", "name", outEnd)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostEnd).Run() })
	ipCmd(t, "link", "set", outEnd, "netns", ns)
	ipCmd(t, "addr", "add", transitHost+"/29", "dev", hostEnd)
	ipCmd(t, "link", "set", hostEnd, "up")
	ipCmd(t, "-n", ns, "addr", "add", transitPeer+"/29", "dev", outEnd)
	ipCmd(t, "-n", ns, "link", "set", outEnd, "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	beyond := []string{outsideAddr}
	for _, a := range reservedAddrs {
		beyond = append(beyond, a)
	}
	for _, a := range beyond {
		ipCmd(t, "-n", ns, "addr", "add", a+"/32", "dev", "lo")
		ipCmd(t, "route", "add", a+"/32", "via", transitPeer, "dev", hostEnd)
	}
	for _, a := range append(beyond, transitPeer) {
		if dev := routeDev(t, a); dev != hostEnd {
			t.Fatalf("%s would leave by %s, not the test's veth %s; not sending anything", a, dev, hostEnd)
		}
	}
	nsPath := "/run/netns/" + ns
	n.outside = listenIn(t, nsPath, outsideAddr+":0")
	n.targets = append(n.targets,
		target{"outside", n.outside.ln.Addr().String(), n.outside, true})
	gateway := listenIn(t, nsPath, transitPeer+":0")
	n.targets = append(n.targets, target{"attached-gateway", gateway.ln.Addr().String(), gateway, false})
	for name, a := range reservedAddrs {
		l := listenIn(t, nsPath, a+":0")
		n.targets = append(n.targets, target{name, l.ln.Addr().String(), l, false})
	}

	// The host's private and link-local addresses, on an interface of the
	// test's (a veth pair with both ends on the host, since not every
	// kernel has dummy interfaces).
	dummy, peer := netName("d"), netName("p")
	ipCmd(t, "link", "add", dummy, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", dummy).Run() })
	for _, a := range []string{privateAddr, metadataAddr} {
		ipCmd(t, "addr", "add", a+"/32", "dev", dummy)
	}
	ipCmd(t, "link", "set", dummy, "up")
	for _, a := range []string{privateAddr, metadataAddr} {
		if dev := routeDev(t, a); dev != "lo" {
			t.Fatalf("%s is not the host's own (route via %s); not sending anything", a, dev)
		}
	}
	n.private = listen(t, privateAddr+":0")
	n.metadata = listen(t, metadataAddr+":0")
	n.loopback = listen(t, "127.0.0.1:0")
	transit := listen(t, transitHost+":0")
	n.targets = append(n.targets,
		target{"loopback", n.loopback.ln.Addr().String(), n.loopback, false},
		// slirp4netns's gateway to the host, with the loopback listener's port.
		target{"gateway-to-host-loopback", fmt.Sprintf("10.0.2.2:%d", n.loopback.ln.Addr().(*net.TCPAddr).Port), n.loopback, false},
		target{"private", n.private.ln.Addr().String(), n.private, false},
		target{"metadata", n.metadata.ln.Addr().String(), n.metadata, false},
		// The host's own address on the network it shares with the gateway.
		target{"host-transit", transit.ln.Addr().String(), transit, false})
	if ip := hostIP(t); ip != nil {
		h := listen(t, net.JoinHostPort(ip.String(), "0"))
		n.targets = append(n.targets, target{"host-address", h.ln.Addr().String(), h, false})
	}
	return n
}

// listenIn listens at addr inside the network namespace at nsPath. The
// socket stays in that namespace whichever thread uses it later.
func listenIn(t *testing.T, nsPath, addr string) *hostListener {
	t.Helper()
	type made struct {
		h   *hostListener
		err error
	}
	ch := make(chan made, 1)
	go func() {
		// Never unlocked: the thread dies with the goroutine instead of
		// going back to the runtime in the wrong namespace.
		runtime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- made{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- made{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			ch <- made{err: err}
			return
		}
		ch <- made{h: serve(t, ln)}
	}()
	m := <-ch
	if m.err != nil {
		t.Fatal(m.err)
	}
	return m.h
}

// connectProbe is a script line that connects to addr and prints name=ok or
// name=no.
func connectProbe(name, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("if timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && read -r l <&3 && [ \"$l\" = hello ]' 2>/dev/null; then echo %s=ok; else echo %s=no; fi\n",
		host, port, name, name)
}

func (n *testNet) script() string {
	var b strings.Builder
	for _, tg := range n.targets {
		b.WriteString(connectProbe(tg.name, tg.addr))
	}
	return b.String()
}

// stacksOf lists the live processes of the network stacks of this test
// binary's sandboxes: those of the uid just below its sessions' range
// (the holders of the namespaces and slirp4netns).
func stacksOf(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st := procStatus(pid); st["Uid"] != "" && strings.Fields(st["Uid"])[0] == strconv.Itoa(int(uidBase-1)) && !strings.HasPrefix(st["State"], "Z") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStatus is /proc/pid/status as a map; empty when it is gone.
func procStatus(pid int) map[string]string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	m := map[string]string{}
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// TestEgressAllowReachesOnlyTheOutside: a command with Allow reaches a
// server beyond the host and none of the host's own: not its loopback
// (directly or through the stack's gateway), not a private address, not
// the metadata address, not its own addresses, not a gateway on a network
// it is attached to, and none of the reserved ranges, although they are
// routed like the outside. Deny reaches none. No stack process outlives
// its command.
func TestEgressAllowReachesOnlyTheOutside(t *testing.T) {
	n := newTestNet(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)

	res := s.runNet(t, sandbox.Allow, n.script())
	out := string(res.Stdout)
	t.Logf("allow:\n%s%s", out, res.Stderr)
	for _, tg := range n.targets {
		want := "no"
		if tg.allow {
			want = "ok"
		}
		if !strings.Contains(out, tg.name+"="+want+"\n") {
			t.Errorf("allow: %s (%s) is not %s", tg.name, tg.addr, want)
		}
		if !tg.allow && tg.l.accepted.Load() != 0 {
			t.Errorf("allow: the listener at %s (%s) was reached", tg.name, tg.addr)
		}
	}
	if got := n.outside.accepted.Load(); got != 1 {
		t.Errorf("allow: the outside listener took %d connections, want 1", got)
	}
	if left := stacksOf(t); len(left) > 0 {
		t.Errorf("network stack processes outlived the command: %v", left)
	}

	res = s.runNet(t, sandbox.Deny, n.script())
	t.Logf("deny:\n%s%s", res.Stdout, res.Stderr)
	for _, tg := range n.targets {
		if !strings.Contains(string(res.Stdout), tg.name+"=no\n") {
			t.Errorf("deny: %s (%s) was reached", tg.name, tg.addr)
		}
	}
	if got := n.outside.accepted.Load(); got != 1 {
		t.Errorf("deny reached the outside listener")
	}
}

// TestEgressAllowCIDRs: a network the operator lists becomes reachable;
// the rest stay out of reach, and loopback stays out even when listed.
func TestEgressAllowCIDRs(t *testing.T) {
	n := newTestNet(t)
	sb := newSandbox(t, func(c *sandbox.Config) {
		c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.213.0.0/16"), netip.MustParsePrefix("127.0.0.0/8")}
	})
	s := newSession(t, sb)
	res := s.runNet(t, sandbox.Allow, n.script())
	out := string(res.Stdout)
	t.Logf("allow with 10.213.0.0/16 listed:\n%s%s", out, res.Stderr)
	for name, want := range map[string]string{"outside": "ok", "private": "ok", "metadata": "no", "loopback": "no", "gateway-to-host-loopback": "no"} {
		if !strings.Contains(out, name+"="+want+"\n") {
			t.Errorf("%s is not %s", name, want)
		}
	}
	if n.metadata.accepted.Load() != 0 || n.loopback.accepted.Load() != 0 {
		t.Error("a listener that is not listed was reached")
	}
}

// TestEgressShellStackEndsWithIt: a shell started with Allow has the
// outside while it runs, and its stack goes when it does.
func TestEgressShellStackEndsWithIt(t *testing.T) {
	n := newTestNet(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	term := openPTY(t)
	spec := sandbox.Spec{UID: s.uid, GID: s.uid, Dir: s.dir, Home: s.home, TTY: term.slave, Network: sandbox.Allow,
		Argv: []string{"/bin/bash", "--noprofile", "--norc", "-i"}, ExtraEnv: []string{"TERM=xterm"}}
	p, err := sb.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	term.slave.Close()
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	term.write(t, strings.ReplaceAll(connectProbe("outside", n.outside.ln.Addr().String()), "\n", "")+"; echo done\n")
	term.expect(t, "outside=ok")
	// While it runs, the stack holds no privilege on the host: its uid is
	// not root (nor the session's, which could trace it), and slirp4netns
	// has no new privileges and a seccomp filter.
	stacks := stacksOf(t)
	slirps := 0
	for _, pid := range stacks {
		st := procStatus(pid)
		if ids := strings.Fields(st["Uid"]); len(ids) != 4 || ids[0] != ids[1] || ids[1] != ids[2] || ids[2] != ids[3] {
			t.Errorf("stack process %d (%s) has uids %q", pid, st["Name"], st["Uid"])
		}
		if st["Name"] == "slirp4netns" {
			slirps++
			if st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
				t.Errorf("slirp4netns %d: NoNewPrivs %s, Seccomp %s", pid, st["NoNewPrivs"], st["Seccomp"])
			}
		}
	}
	if slirps != 1 {
		t.Errorf("while the shell runs: %d slirp4netns among the stack's processes %v, want one", slirps, stacks)
	}
	term.write(t, "exit\n")
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the shell did not end")
	}
	if left := stacksOf(t); len(left) > 0 {
		t.Errorf("network stack processes outlived the shell: %v", left)
	}
}

// TestEgressRefusedWithoutStack: without slirp4netns, Allow is refused
// with ErrNetworkUnavailable and the command does not run, neither a
// command nor a shell; Deny still runs.
func TestEgressRefusedWithoutStack(t *testing.T) {
	sb := newSandbox(t, func(c *sandbox.Config) { c.NetStack = "/nonexistent/slirp4netns" })
	s := newSession(t, sb)
	local := listen(t, "127.0.0.1:0")
	spec := s.spec("touch ran; " + local.connect())
	spec.Network = sandbox.Allow
	res, err := sb.Run(context.Background(), spec, sandbox.Limits{})
	if !errors.Is(err, sandbox.ErrNetworkUnavailable) || !errors.Is(err, sandbox.ErrStart) || res != nil {
		t.Fatalf("allow without a network stack: %+v, %v", res, err)
	}
	t.Log(err)
	if _, err := os.Stat(filepath.Join(s.dir, "ran")); err == nil || local.accepted.Load() != 0 {
		t.Error("the command ran anyway")
	}
	term := openPTY(t)
	shell := sandbox.Spec{UID: s.uid, GID: s.uid, Dir: s.dir, Home: s.home, TTY: term.slave, Network: sandbox.Allow, Argv: bash("true")}
	if _, err := sb.Start(shell); !errors.Is(err, sandbox.ErrNetworkUnavailable) {
		t.Errorf("a shell with allow without a network stack: %v", err)
	}
	if out := s.mustRun(t, "echo deny"); out != "deny\n" {
		t.Errorf("deny: %q", out)
	}
}

// TestEgressAllowNamesItsResolvers: a command with the network allowed
// asks slirp4netns's forwarder first, and only resolvers its filter lets
// through, never one on the host's loopback.
func TestEgressAllowNamesItsResolvers(t *testing.T) {
	needTools(t)
	sb := newSandbox(t, nil)
	s := newSession(t, sb)
	res := s.runNet(t, sandbox.Allow, "cat /etc/resolv.conf")
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if res.ExitCode != 0 || len(lines) == 0 || lines[0] != "nameserver 10.0.2.3" {
		t.Fatalf("resolv.conf under allow: exit %d %q %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	for _, l := range lines {
		if strings.Contains(l, "127.") || strings.Contains(l, "::1") {
			t.Errorf("a loopback resolver inside: %q", l)
		}
	}
}
