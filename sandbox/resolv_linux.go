//go:build linux

package sandbox

import (
	"net/netip"
	"os"
	"path"
	"strings"

	"atelier/sandbox/injail"
)

// deniedResolvConf is what a command without the network reads: no name
// server, so a lookup asks the namespace's own loopback and fails at once,
// whatever the host's file is.
const deniedResolvConf = "# no name server: this project's commands have no network\n"

// resolvConf is a command's resolv.conf under n, where the host's own
// leads inside the jail when it is a link ("" when it is a file), and the
// name servers it names. Many hosts link /etc/resolv.conf into /run, which
// the jail does not show: the generated file is then placed where the link
// leads, so tools that follow it find it.
func (s *Sandbox) resolvConf(n Network) (content, at string, rs []netip.Addr) {
	if target, err := os.Readlink(s.cfg.ResolvConf); err == nil {
		at = target
		if !path.IsAbs(at) {
			at = path.Join(path.Dir(injail.HostResolvConf), at)
		}
		at = path.Clean(at)
	}
	if n != Allow {
		return deniedResolvConf, at, nil
	}
	rs = hostResolvers(s.cfg.ResolvConf)
	var b strings.Builder
	for _, r := range rs {
		b.WriteString("nameserver " + r.String() + "\n")
	}
	return b.String(), at, rs
}
