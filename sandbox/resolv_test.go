//go:build linux

package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"atelier/sandbox"
)

// linkedResolvConf makes a host resolv.conf the way systemd-resolved
// leaves it: a relative link from etc/ into run/systemd/resolve/, whose
// file names the loopback stub and one real resolver. It returns the
// link's path.
func linkedResolvConf(t *testing.T, link string) string {
	t.Helper()
	d := t.TempDir()
	for _, dir := range []string{"etc", "run/systemd/resolve"} {
		if err := os.MkdirAll(filepath.Join(d, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := "nameserver 127.0.0.53\nnameserver 192.0.2.53\noptions edns0 trust-ad\n"
	if err := os.WriteFile(filepath.Join(d, "run/systemd/resolve/stub-resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, "etc/resolv.conf")
	if err := os.Symlink(link, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestResolvConfThroughTheHostsLink: with the host's resolv.conf a link
// into /run, which the jail does not show, a command still reads a
// resolv.conf both at /etc/resolv.conf and where the link leads: under
// allow the stack's forwarder, then the host's resolvers off loopback;
// under deny no name server at all.
func TestResolvConfThroughTheHostsLink(t *testing.T) {
	src := linkedResolvConf(t, "../run/systemd/resolve/stub-resolv.conf")
	sb := newSandbox(t, func(c *sandbox.Config) { c.ResolvConf = src })
	s := newSession(t, sb)
	const script = "cat /etc/resolv.conf && echo -- && cat /run/systemd/resolve/stub-resolv.conf"

	res := s.runNet(t, sandbox.Deny, script)
	if res.ExitCode != 0 {
		t.Fatalf("deny: exit %d %q %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	etc, linked, _ := strings.Cut(string(res.Stdout), "--\n")
	if etc != linked || strings.Contains(etc, "nameserver") {
		t.Errorf("deny: /etc/resolv.conf %q, through the link %q; want the same, naming no server", etc, linked)
	}

	needTools(t)
	res = s.runNet(t, sandbox.Allow, script)
	want := "nameserver 10.0.2.3\nnameserver 192.0.2.53\n"
	if res.ExitCode != 0 || string(res.Stdout) != want+"--\n"+want {
		t.Fatalf("allow: exit %d %q %s; want %q at both places", res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

// TestResolvConfLinkIntoTheSessionIsNotFollowed: a host link that leads
// into a folder the session's user writes (here /tmp inside) gets no file
// written there by the helper as root; /etc/resolv.conf is still the
// command's own.
func TestResolvConfLinkIntoTheSessionIsNotFollowed(t *testing.T) {
	src := linkedResolvConf(t, "/tmp/resolv.conf")
	sb := newSandbox(t, func(c *sandbox.Config) { c.ResolvConf = src })
	s := newSession(t, sb)
	// The user's own link in its /tmp, pointing at a host file, is not
	// written through either.
	if err := os.Symlink("/etc/hostname", filepath.Join(s.tmp, "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	hostname, _ := os.ReadFile("/etc/hostname")
	if out := s.mustRun(t, "cat /etc/resolv.conf; ls -A /tmp"); !strings.Contains(out, "no name server") || !strings.HasSuffix(out, "resolv.conf\n") {
		t.Errorf("inside: %q", out)
	}
	if got, _ := os.ReadFile("/etc/hostname"); string(got) != string(hostname) {
		t.Fatalf("the host's /etc/hostname changed to %q", got)
	}
	if target, err := os.Readlink(filepath.Join(s.tmp, "resolv.conf")); err != nil || target != "/etc/hostname" {
		t.Errorf("the session's /tmp/resolv.conf: %q, %v; want the user's link untouched", target, err)
	}
	os.Remove(filepath.Join(s.tmp, "resolv.conf"))
	s.mustRun(t, "true")
	if entries, _ := os.ReadDir(s.tmp); len(entries) != 0 {
		t.Errorf("the session's /tmp holds %v after a command; want nothing written there", entries)
	}
}
