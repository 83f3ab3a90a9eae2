//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"atelier/netblock"
	"atelier/sandbox/injail"
)

// Network Allow is the internet, not the host. A command with Allow gets a
// network namespace of its own whose only way out is slirp4netns: a
// user-mode network stack, a process in the host's namespace that opens
// connections on the namespace's behalf. It runs with
// --disable-host-loopback, so the host's 127.0.0.1 is never behind its
// gateway, and an nftables filter inside the namespace refuses what the
// host itself can reach but the internet cannot, from the one list the
// import check uses too (netblock): loopback other than the namespace's own
// lo, link-local (cloud metadata at 169.254.169.254), private, CGNAT and
// reserved ranges, every address the host has and every network it is
// attached to (its gateway included), in IPv4 and every IPv6 form, unless
// Config.AllowNetworks lists them. DNS passes to slirp4netns's forwarder
// and to the host's resolvers, on port 53 only.
//
// Nothing of it runs as root. A holder process of stackUID (the uid just
// below the sessions' range, never a session's uid, which could then trace
// the stack and use its sockets in the host's namespace) makes a user
// namespace where it alone is root, and the network namespace in it. The
// server, as root, brings lo up and writes the filter there; the command's
// init helper joins the network namespace only, so the command stays the
// session's uid outside that user namespace and cannot change the filter.
// slirp4netns runs as stackUID with no capability: as owner of the
// holder's user namespace it may enter it to make its tap device, and with
// --enable-sandbox it then keeps only CAP_NET_BIND_SERVICE (in that user
// namespace) in a mount namespace of its own whose root is empty but for
// read-only /etc and /run; --enable-seccomp narrows its system calls.
// Its tap device needs /dev/net/tun open to everyone (mode 0666, as udev
// makes it and rootless containers need it).
//
// Both end when the command does: the server closes the pipe they wait
// on, and kills them if they linger; if the server dies the pipe closes
// too.

// stackDNS is slirp4netns's DNS forwarder inside the namespace (its
// default network, 10.0.2.0/24).
var stackDNS = netip.MustParseAddr("10.0.2.3")

const (
	stackTap      = "tap0"
	stackReady    = 10 * time.Second // from start to the interface being up
	stackEndWait  = 2 * time.Second  // from closing the exit pipe to SIGKILL
	stackStderrAt = 4 << 10          // bytes of the stack's stderr kept for errors
)

// findEgress finds what Network Allow needs at the sandbox's start and
// says at once when Allow will be refused.
func (s *Sandbox) findEgress() {
	s.stack, s.unshare, s.stackErr = findEgressTools(s.cfg.NetStack)
	if s.stackErr == nil {
		if err := checkRange(s.stackUID(), 1); err != nil {
			s.stackErr = fmt.Errorf("%w: the uid below the sessions' range runs the network stack: %w", ErrNetworkUnavailable, err)
		}
	}
	if s.stackErr != nil {
		s.log.Warn("sandbox: network allow is refused", "err", s.stackErr)
	}
}

// findEgressTools returns slirp4netns (stack "" looks on PATH and in
// /usr/bin) and unshare, or why Allow cannot be had.
func findEgressTools(stack string) (string, string, error) {
	find := func(path, name, pkg string) (string, error) {
		if path == "" {
			if p, err := exec.LookPath(name); err == nil {
				path = p
			} else {
				path = "/usr/bin/" + name
			}
		}
		if !filepath.IsAbs(path) {
			return "", fmt.Errorf("%w: %s %q is not an absolute path", ErrNetworkUnavailable, name, path)
		}
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: %s is not installed at %s (Debian package %s)", ErrNetworkUnavailable, name, path, pkg)
		}
		return path, nil
	}
	stack, err := find(stack, "slirp4netns", "slirp4netns")
	if err != nil {
		return "", "", err
	}
	unshare, err := find("", "unshare", "util-linux")
	if err != nil {
		return "", "", err
	}
	if st, err := os.Stat("/dev/net/tun"); err != nil || st.Mode()&os.ModeCharDevice == 0 || st.Mode().Perm()&0o006 != 0o006 {
		return "", "", fmt.Errorf("%w: /dev/net/tun must be a device open to everyone (mode 0666, as udev makes it)", ErrNetworkUnavailable)
	}
	return stack, unshare, nil
}

// stackUID is the uid of the holder and slirp4netns.
func (s *Sandbox) stackUID() uint32 { return s.cfg.UIDBase - 1 }

// egress is one Allow command's network: its namespace, the holder of the
// user namespace that owns it, and the stack that connects it outside.
type egress struct {
	ns     *os.File // the namespace; the init helper joins it (fd 4)
	exit   *os.File // closing it ends the holder and the stack
	holder *exec.Cmd
	stack  *exec.Cmd // nil until started
	stderr *cappedBuffer
	once   sync.Once
}

// openEgress makes the network of an Allow command; nil for any other
// policy. Its errors wrap ErrNetworkUnavailable.
func (s *Sandbox) openEgress(n Network, resolvers []netip.Addr) (*egress, error) {
	if n != Allow {
		return nil, nil
	}
	if s.stackErr != nil {
		return nil, s.stackErr
	}
	e, err := s.startEgress(resolvers)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNetworkUnavailable, err)
	}
	return e, nil
}

// startEgress starts the holder, writes the namespace's lo and filter,
// and starts slirp4netns on it (see the top of this file).
func (s *Sandbox) startEgress(resolvers []netip.Addr) (_ *egress, err error) {
	exitR, exitW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer exitR.Close()
	holderOut, holderOutW, err := os.Pipe()
	if err != nil {
		exitW.Close()
		return nil, err
	}
	defer holderOut.Close()
	id := s.stackUID()
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Setsid: true, Credential: &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}}}
	}
	e := &egress{exit: exitW, stderr: &cappedBuffer{max: stackStderrAt}}
	// The holder says "ready" once its namespaces and id maps exist (unshare
	// writes the maps before the exec), then waits on the exit pipe.
	e.holder = &exec.Cmd{
		Path: s.unshare,
		Args: []string{"unshare", "--user", "--map-root-user", "--net", "--",
			"/bin/sh", "-c", "echo ready && exec cat >/dev/null"},
		Env: []string{}, Dir: "/", Stdin: exitR, Stdout: holderOutW, Stderr: e.stderr,
		SysProcAttr: attr(),
	}
	err = e.holder.Start()
	holderOutW.Close()
	if err != nil {
		exitW.Close()
		return nil, fmt.Errorf("namespace holder: %w", err)
	}
	defer func() {
		if err != nil {
			e.end()
		}
	}()
	if err := readReady(holderOut, len("ready\n")); err != nil {
		return nil, fmt.Errorf("namespace holder: %w: %s", err, e.stderr)
	}
	pid := e.holder.Process.Pid
	if e.ns, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		return nil, err
	}
	if err := inNetns(e.ns, injail.LoopbackUp); err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	if err := installEgressFilter(e.ns, s.cfg.AllowNetworks, resolvers); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	stack := &exec.Cmd{
		Path: s.stack,
		Args: []string{"slirp4netns",
			"--configure", "--mtu=65520", "--disable-host-loopback",
			"--enable-sandbox", "--enable-seccomp",
			"--exit-fd=3", "--ready-fd=4",
			strconv.Itoa(pid), stackTap},
		Env: []string{}, Dir: "/", ExtraFiles: []*os.File{exitR, readyW}, Stderr: e.stderr,
		SysProcAttr: attr(),
	}
	err = stack.Start()
	readyW.Close()
	if err != nil {
		return nil, fmt.Errorf("slirp4netns: %w", err)
	}
	e.stack = stack
	if err := readReady(readyR, 1); err != nil {
		return nil, fmt.Errorf("slirp4netns: %w: %s", err, e.stderr)
	}
	return e, nil
}

// readReady waits up to stackReady for n bytes on r.
func readReady(r *os.File, n int) error {
	r.SetReadDeadline(time.Now().Add(stackReady))
	if _, err := io.ReadFull(r, make([]byte, n)); err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	return nil
}

// inNetns runs f on a thread in the namespace ns. The thread stays locked
// and so ends with its goroutine instead of going back to the runtime in
// the wrong namespace.
func inNetns(ns *os.File, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		ch <- f()
	}()
	return <-ch
}

// files are what the init helper gets beyond its socket: the namespace as
// its fd 4.
func (e *egress) files() []*os.File {
	if e == nil {
		return nil
	}
	return []*os.File{e.ns}
}

// end stops the stack and the holder and waits for them; the namespace
// goes with them. It is safe to call more than once and on nil.
func (e *egress) end() {
	if e == nil {
		return
	}
	e.once.Do(func() {
		e.exit.Close()
		if e.ns != nil {
			e.ns.Close()
		}
		for _, p := range []*exec.Cmd{e.stack, e.holder} {
			if p == nil {
				continue
			}
			waited := make(chan struct{})
			go func() { p.Wait(); close(waited) }()
			select {
			case <-waited:
				continue
			case <-time.After(stackEndWait):
			}
			// Each has a session of its own with nothing else in it.
			unix.Kill(-p.Process.Pid, unix.SIGKILL)
			p.Process.Kill()
			<-waited
		}
	})
}

// installEgressFilter writes the namespace's output filter: its own lo and
// DNS to resolvers pass, then netblock's rules decide, in their order:
// loopback refused, the operator's networks allowed, and every range that is
// not the internet refused, with the host's addresses and the networks they
// sit on; the rest passes.
func installEgressFilter(ns *os.File, allowed []netip.Prefix, resolvers []netip.Addr) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "atelier"})
	accept := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{
		Name: "egress", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	rule := func(exprs ...expr.Any) { c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs}) }
	pass := &expr.Verdict{Kind: expr.VerdictAccept}
	// A refused connection fails at once: a TCP reset (an ICMP error to
	// a connect in progress is only retried), ICMP for the rest.
	refusal := c.AddChain(&nftables.Chain{Name: "refuse", Table: table})
	c.AddRule(&nftables.Rule{Table: table, Chain: refusal, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	}})
	c.AddRule(&nftables.Rule{Table: table, Chain: refusal, Exprs: []expr.Any{
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED},
	}})
	refuse := &expr.Verdict{Kind: expr.VerdictJump, Chain: refusal.Name}

	lo := make([]byte, 4)
	binary.NativeEndian.PutUint32(lo, 1) // lo is ifindex 1 in every namespace
	rule(&expr.Meta{Key: expr.MetaKeyOIF, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo}, pass)

	for _, r := range resolvers {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			ex := matchDst(netip.PrefixFrom(r, r.BitLen()))
			ex = append(ex,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, 53)},
				pass)
			rule(ex...)
		}
	}
	// The host's interfaces are read for each command: its addresses and
	// networks change.
	host, err := netblock.Interfaces()
	if err != nil {
		return err
	}
	reach := netblock.New(netblock.Config{Allow: allowed, Host: host, ClosedLoopback: true})
	for _, r := range reach.Rules() {
		verdict := refuse
		if r.Allow {
			verdict = pass
		}
		rule(append(matchDst(r.Prefix), verdict)...)
	}
	return c.Flush()
}

// matchDst matches packets whose destination lies in p.
func matchDst(p netip.Prefix) []expr.Any {
	p = p.Masked()
	proto, offset := byte(unix.NFPROTO_IPV4), uint32(16) // daddr in the IPv4 header
	if p.Addr().Is6() {
		proto, offset = unix.NFPROTO_IPV6, 24
	}
	addr := p.Addr().AsSlice()
	mask := net.CIDRMask(p.Bits(), len(addr)*8)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(len(addr))},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: mask, Xor: make([]byte, len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
	}
}

// hostResolvers reads the host's name servers from path (a link is
// followed: the host's files are root's) and returns those a command may
// ask: slirp4netns's forwarder first, then the host's own unless they are
// on loopback, which is the host's and not the namespace's.
func hostResolvers(path string) []netip.Addr {
	rs := []netip.Addr{stackDNS}
	b, err := os.ReadFile(path)
	if err != nil {
		return rs
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsLoopback() && a.Zone() == "" {
			rs = append(rs, a.Unmap())
		}
	}
	return rs
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}
