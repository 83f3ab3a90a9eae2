package gitsvc

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"atelier/fault"
	"atelier/netblock"
)

// maxCredentials bounds the user name and password of a source together;
// they travel through a pipe that must take them before git starts.
const maxCredentials = 8 << 10

// credentialHelper is git's only credential helper during a fetch with
// credentials. It answers "get" with what the server wrote into the pipe
// git inherits as fd 3, and ignores "store" and "erase": the credentials
// never pass through an argument list, an environment or a file.
const credentialHelper = `!f() { case "$1" in get) cat <&3 ;; esac; }; f`

// fetchSource is a source made ready for git.
type fetchSource struct {
	url      string // what git is given: never any credentials
	protocol string // the one transport git may use (GIT_ALLOW_PROTOCOL)
	// credentials is what credentialHelper hands git, nil when the source
	// named none.
	credentials []byte
	// secrets are the user name and password as the source spells them
	// and as they reach the host, to be kept out of what git writes back.
	secrets []string
	// resolve is http.curloptResolve: the addresses that were checked,
	// the only ones curl may connect to; "" leaves the lookup to curl.
	resolve string
}

// defaultPorts are the ports a URL without one connects to.
var defaultPorts = map[string]string{"http": "80", "https": "443", "git": "9418"}

// prepareSource checks source as FetchInto documents and turns it into
// what git is given.
func (s *Service) prepareSource(ctx context.Context, source string, trusted bool) (*fetchSource, error) {
	protocol, err := sourceProtocol(source, trusted)
	if err != nil {
		return nil, err
	}
	bad := func(why string) error {
		return fault.Detailf(ErrBadArgument, ": source %q: %s", SanitizeURL(source), why)
	}
	switch protocol {
	case "file":
		return &fetchSource{url: source, protocol: protocol}, nil
	case "ssh":
		// Without a key of its own the server could only reach anonymous
		// ssh servers, and ssh connects to any port it is given.
		if !trusted {
			return nil, fault.Detailf(ErrSourceNotAllowed, ": %s: ssh sources are for site admins; use the repository's https URL", SanitizeURL(source))
		}
		if strings.Contains(source, "://") {
			u, err := url.Parse(source)
			if err != nil {
				return nil, bad("not a valid URL")
			}
			if _, has := u.User.Password(); has {
				return nil, bad("ssh takes no password in the URL")
			}
		}
		return &fetchSource{url: source, protocol: protocol}, nil
	}

	// http, https and git: git is given a URL rebuilt from what Go parsed,
	// so git and this check cannot read different hosts out of it.
	u, err := url.Parse(source)
	if err != nil || u.Opaque != "" || u.Host == "" {
		return nil, bad("not a valid URL")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, bad("a git URL has no query or fragment")
	}
	fs := &fetchSource{protocol: protocol}
	if u.User != nil {
		if protocol == "git" {
			return nil, bad("git:// takes no user name")
		}
		password, _ := u.User.Password()
		if fs.credentials, err = credentialLines(u.User.Username(), password); err != nil {
			return nil, bad(err.Error())
		}
		fs.secrets = append(rawUserInfo(source), u.User.Username(), password)
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = defaultPorts[protocol]
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, bad("bad port")
	}
	var addrs []netip.Addr
	literal, err := netip.ParseAddr(host)
	isLiteral := err == nil
	switch {
	case isLiteral && literal.Zone() != "":
		return nil, bad("an address with a zone")
	case isLiteral:
		addrs = []netip.Addr{literal}
	case !isHostName(host):
		return nil, bad("bad host name")
	}
	if !trusted {
		if !isLiteral {
			if addrs, err = s.lookup(ctx, host); err != nil || len(addrs) == 0 {
				return nil, fmt.Errorf("gitsvc: fetch %s: %w: %w", SanitizeURL(source), ErrUnreachable, err)
			}
		}
		host, err := s.interfaces()
		if err != nil {
			return nil, err
		}
		reach := netblock.New(netblock.Config{Allow: s.allow, Host: host})
		for _, a := range addrs {
			if ok, kind := reach.Check(a); !ok {
				return nil, fault.Detailf(ErrSourceNotAllowed, ": %s: its host is %s, which imports may not reach", SanitizeURL(source), kind)
			}
		}
	}
	urlHost := func(h string) string {
		if a, err := netip.ParseAddr(h); err == nil && a.Is6() {
			h = "[" + a.String() + "]"
		}
		if u.Port() != "" {
			h += ":" + u.Port()
		}
		return h
	}
	// Connecting only to the addresses checked above defeats a name that
	// resolves to something else the second time it is asked.
	switch {
	case trusted || isLiteral:
	case protocol == "git":
		host = addrs[0].Unmap().String()
	default:
		pins := make([]string, len(addrs))
		for i, a := range addrs {
			pins[i] = a.Unmap().String()
			if a.Unmap().Is6() {
				pins[i] = "[" + pins[i] + "]"
			}
		}
		fs.resolve = host + ":" + port + ":" + strings.Join(pins, ",")
	}
	fs.url = u.Scheme + "://" + urlHost(host) + u.EscapedPath()
	return fs, nil
}

// credentialLines is the user and password in git's credential protocol.
// An empty password is sent too, so git does not ask for one: a token
// given as the user name alone is a complete credential for most hosts.
func credentialLines(user, password string) ([]byte, error) {
	for _, v := range []string{user, password} {
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("control character in the credentials")
		}
	}
	lines := "username=" + user + "\npassword=" + password + "\n"
	if len(lines) > maxCredentials {
		return nil, fmt.Errorf("credentials over %d bytes", maxCredentials)
	}
	return []byte(lines), nil
}

// isHostName accepts DNS names of letters, digits, '-' and '_' whose last
// label starts with a letter, as every top-level domain does. Anything
// else (2130706433, 0x7f.1, 127.1, names curl would turn into punycode)
// might reach an address other than the one checked.
func isHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return last[0] >= 'a' && last[0] <= 'z'
}

// lookupHost resolves a host name as the fetch would.
func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// rawUserInfo is the user name and password of a URL exactly as written,
// before any percent-decoding; the user part ends at the last '@' before
// the first '/', as SanitizeURL reads it.
func rawUserInfo(source string) []string {
	_, rest, _ := strings.Cut(source, "://")
	auth, _, _ := strings.Cut(rest, "/")
	at := strings.LastIndexByte(auth, '@')
	if at < 0 {
		return nil
	}
	user, password, _ := strings.Cut(auth[:at], ":")
	return []string{user, password}
}
