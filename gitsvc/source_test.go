package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"atelier/testrig/githttptest"
)

// TestSourceReach is the import check from the side of someone who names
// an internal place as a git source: a literal address in every form that
// leads to it, or a name that resolves to one, is refused before git runs;
// the internet, and what the operator allows, pass. The server here sits
// on 192.88.99.7/24 and 2a00:1450:4001:81c::7/64, public networks, so
// their other addresses (a gateway) are refused for being attached to it.
func TestSourceReach(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, func(c *Config) {
		c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("fd12::/16")}
	})
	s.interfaces = func() ([]netip.Prefix, error) {
		return []netip.Prefix{
			netip.MustParsePrefix("127.0.0.1/8"), netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("192.88.99.7/24"), netip.MustParsePrefix("2a00:1450:4001:81c::7/64"),
			netip.MustParsePrefix("fe80::7/64"),
		}, nil
	}
	s.lookup = fakeLookup(map[string][]string{
		"public.example":     {"93.184.215.14"},
		"gateway.example":    {"192.88.99.1"},
		"mapped.example":     {"::ffff:10.1.2.3"},
		"nat64.example":      {"64:ff9b::a9fe:a9fe"},
		"translated.example": {"::ffff:0:7f00:1"},
	})
	tests := []struct {
		host string // as it stands in the URL
		want bool
	}{
		{"93.184.215.14", true},
		{"140.82.121.4", true},
		{"[2606:4700::6810:84e5]", true},
		{"100.63.255.255", true},
		{"100.128.0.0", true},
		{"172.32.0.1", true},
		{"198.17.255.255", true},
		{"198.20.0.0", true},
		{"239.255.255.255", false},
		{"192.88.98.1", true},
		{"public.example", true},
		{"[::ffff:93.184.215.14]", true},
		{"[64:ff9b::5db8:d70e]", true}, // NAT64 of a public address
		{"[2002:5db8:d70e::1]", true},  // 6to4 of a public address

		// IPv4: this network, private, CGNAT, loopback, link-local,
		// protocol assignments, documentation, benchmarking, multicast,
		// reserved and broadcast.
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"169.254.169.254", false},
		{"192.0.0.170", false},
		{"192.0.2.1", false},
		{"198.51.100.7", false},
		{"203.0.113.9", false},
		{"198.18.0.1", false},
		{"198.19.255.255", false},
		{"224.0.0.1", false},
		{"240.0.0.1", false},
		{"255.255.255.255", false},

		// The host: its own addresses, and the networks it is attached to.
		{"192.88.99.7", false},
		{"192.88.99.1", false},
		{"gateway.example", false},
		{"[2a00:1450:4001:81c::7]", false},
		{"[2a00:1450:4001:81c::1]", false},
		{"[::ffff:192.88.99.1]", false},
		{"[64:ff9b::c058:6301]", false},
		{"[2002:c058:6301::1]", false},

		// IPv6: unspecified, loopback, IPv4-compatible, mapped, translated,
		// NAT64 (well-known and local-use), 6to4, Teredo, documentation,
		// unique local, link-local, site-local, multicast.
		{"[::]", false},
		{"[::1]", false},
		{"[::127.0.0.1]", false},
		{"[::a01:203]", false},
		{"[::ffff:127.0.0.1]", false},
		{"[::ffff:169.254.169.254]", false},
		{"[::ffff:10.1.2.3]", false},
		{"mapped.example", false},
		{"[::ffff:0:7f00:1]", false}, // IPv4-translated 127.0.0.1
		{"[::ffff:0:5db8:d70e]", false},
		{"translated.example", false},
		{"[64:ff9b::7f00:1]", false},
		{"[64:ff9b::a9fe:a9fe]", false},
		{"nat64.example", false},
		{"[64:ff9b::c000:201]", false},
		{"[64:ff9b:1::5db8:d70e]", false},
		{"[2002:7f00:1::1]", false},
		{"[2002:a9fe:a9fe::1]", false},
		{"[2002:c0a8:101::1]", false},
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]", false}, // Teredo
		{"[2001:db8::7]", false},
		{"[3fff::1]", false},
		{"[2001:2::1]", false},
		{"[fc00::1]", false},
		{"[fd00:ec2::254]", false},
		{"[fe80::1]", false},
		{"[fec0::1]", false},
		{"[ff02::1]", false},

		// What the operator allows, in any form.
		{"10.9.3.4", true},
		{"[::ffff:10.9.3.4]", true},
		{"[64:ff9b::a09:304]", true},
		{"[2002:a09:304::1]", true},
		{"10.10.0.1", false},
		{"[fd12::1]", true},
		{"[fd13::1]", false},
	}
	for _, tt := range tests {
		source := "https://" + tt.host + "/r.git"
		_, err := s.prepareSource(ctx, source, false)
		switch {
		case tt.want && err != nil:
			t.Errorf("%s: %v, want it allowed", source, err)
		case !tt.want && !errors.Is(err, ErrSourceNotAllowed):
			t.Errorf("%s: %v, want ErrSourceNotAllowed", source, err)
		case !tt.want && !strings.Contains(err.Error(), "its host is a"):
			t.Errorf("%s: %v does not say what the host is", source, err)
		}
	}
}

// fakeLookup resolves names from a table; other names do not exist.
func fakeLookup(names map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		as, ok := names[host]
		if !ok {
			return nil, fmt.Errorf("lookup %s on 10.0.0.53:53: no such host", host)
		}
		var addrs []netip.Addr
		for _, a := range as {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
		return addrs, nil
	}
}

func TestPrepareSource(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, func(c *Config) { c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")} })
	s.lookup = fakeLookup(map[string][]string{
		"git.example.com": {"93.184.215.14", "2606:4700::6810:84e5"},
		"inside.example":  {"10.1.2.3"},
		"mixed.example":   {"93.184.215.14", "127.0.0.1"},
		"allowed.example": {"10.9.0.5"},
	})
	tests := []struct {
		source      string
		trusted     bool
		url         string // what git gets; "" with err
		resolve     string
		credentials string
		err         error
	}{
		{source: "https://git.example.com/o/r.git", url: "https://git.example.com/o/r.git",
			resolve: "git.example.com:443:93.184.215.14,[2606:4700::6810:84e5]"},
		{source: "https://User:s3cret@Git.Example.com:8443/o/r.git", url: "https://git.example.com:8443/o/r.git",
			resolve: "git.example.com:8443:93.184.215.14,[2606:4700::6810:84e5]", credentials: "username=User\npassword=s3cret\n"},
		{source: "https://tok%40en@git.example.com/r", url: "https://git.example.com/r",
			resolve: "git.example.com:443:93.184.215.14,[2606:4700::6810:84e5]", credentials: "username=tok@en\npassword=\n"},
		{source: "http://93.184.215.14/r.git", url: "http://93.184.215.14/r.git"},
		{source: "http://[2606:4700::6810:84e5]:81/r.git", url: "http://[2606:4700::6810:84e5]:81/r.git"},
		{source: "git://git.example.com/r.git", url: "git://93.184.215.14/r.git"},
		{source: "https://allowed.example/r", url: "https://allowed.example/r", resolve: "allowed.example:443:10.9.0.5"},
		{source: "http://10.9.8.7/r", url: "http://10.9.8.7/r"},

		// Internal addresses, named or literal.
		{source: "http://127.0.0.1:8080/r.git", err: ErrSourceNotAllowed},
		{source: "http://localhost/r.git", err: ErrSourceNotAllowed}, // the real resolver below
		{source: "http://[::1]/r.git", err: ErrSourceNotAllowed},
		{source: "http://[::ffff:127.0.0.1]/r.git", err: ErrSourceNotAllowed},
		{source: "http://10.1.2.3/r.git", err: ErrSourceNotAllowed},
		{source: "http://169.254.169.254/latest/meta-data", err: ErrSourceNotAllowed},
		{source: "https://inside.example/r.git", err: ErrSourceNotAllowed},
		{source: "https://mixed.example/r.git", err: ErrSourceNotAllowed},
		{source: "git://inside.example/r.git", err: ErrSourceNotAllowed},
		{source: "ssh://git@git.example.com/r.git", err: ErrSourceNotAllowed},
		{source: "git@git.example.com:o/r.git", err: ErrSourceNotAllowed},
		{source: "https://nowhere.example/r.git", err: ErrUnreachable},

		// Hosts that are numbers in disguise, or that a URL parser might
		// read differently from git.
		{source: "http://2130706433/r", err: ErrBadArgument},
		{source: "http://0x7f.1/r", err: ErrBadArgument},
		{source: "http://127.1/r", err: ErrBadArgument},
		{source: "http://git.example.com./r", err: ErrBadArgument},
		{source: "http://bücher.example/r", err: ErrBadArgument},
		{source: "http://[fe80::1%25eth0]/r", err: ErrBadArgument},
		{source: `http://git.example.com\@127.0.0.1/r`, err: ErrBadArgument},
		{source: "https://git.example.com/r?private_token=x", err: ErrBadArgument},
		{source: "https://git.example.com/r#x", err: ErrBadArgument},
		{source: "https://u:p%0Aass@git.example.com/r", err: ErrBadArgument},
		{source: "git://u@git.example.com/r", err: ErrBadArgument},
		{source: "https://git.example.com:0/r", err: ErrBadArgument},

		// Site admins reach anything, still without credentials on git's
		// command line and without a pin.
		{source: "http://u:s3cret@127.0.0.1:8080/r.git", trusted: true, url: "http://127.0.0.1:8080/r.git", credentials: "username=u\npassword=s3cret\n"},
		{source: "https://inside.example/r.git", trusted: true, url: "https://inside.example/r.git"},
		{source: "git@git.example.com:o/r.git", trusted: true, url: "git@git.example.com:o/r.git"},
		{source: "ssh://git@git.example.com:22/r.git", trusted: true, url: "ssh://git@git.example.com:22/r.git"},
		{source: "ssh://git:pw@git.example.com/r.git", trusted: true, err: ErrBadArgument},
		{source: "/srv/r.git", trusted: true, url: "/srv/r.git"},
	}
	for _, tt := range tests {
		if tt.source == "http://localhost/r.git" {
			s.lookup = lookupHost
		}
		got, err := s.prepareSource(ctx, tt.source, tt.trusted)
		s.lookup = fakeLookup(map[string][]string{
			"git.example.com": {"93.184.215.14", "2606:4700::6810:84e5"},
			"inside.example":  {"10.1.2.3"},
			"mixed.example":   {"93.184.215.14", "127.0.0.1"},
			"allowed.example": {"10.9.0.5"},
		})
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("prepareSource(%q, %v) = %+v, %v; want %v", tt.source, tt.trusted, got, err, tt.err)
			} else if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("prepareSource(%q): the error shows too much: %v", tt.source, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("prepareSource(%q, %v): %v", tt.source, tt.trusted, err)
			continue
		}
		if got.url != tt.url || got.resolve != tt.resolve || string(got.credentials) != tt.credentials {
			t.Errorf("prepareSource(%q, %v) = url %q resolve %q credentials %q; want %q %q %q",
				tt.source, tt.trusted, got.url, got.resolve, got.credentials, tt.url, tt.resolve, tt.credentials)
		}
	}
}

// bareRepo makes root/name.git from a repository with one commit.
func bareRepo(t *testing.T, root, name string) (head string) {
	t.Helper()
	src := newRepo(t)
	tgit(t, root, "clone", "-q", "--bare", src, filepath.Join(root, name+".git"))
	return tgit(t, src, "rev-parse", "HEAD")
}

func TestFetchIntoCredentialsOverHTTP(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	root := realDir(t)
	head := bareRepo(t, root, "repo")
	srv := githttptest.New(t, root, "alice", "s3cret-tok")

	source := "http://alice:s3cret-tok@" + srv.Host + "/repo.git"
	got, err := s.FetchInto(ctx, r, source, true)
	if err != nil {
		t.Fatalf("FetchInto: %v", err)
	}
	if got != head {
		t.Errorf("FetchInto = %s, want %s", got, head)
	}
	// The credentials reached the host: they were not simply dropped.
	if srv.Authorized() == 0 {
		t.Error("no request carried the credentials")
	}

	// Wrong credentials fail without showing them.
	_, err = s.FetchInto(ctx, r, "http://alice:wrong-tok@"+srv.Host+"/repo.git", true)
	var ge *GitError
	if !errors.As(err, &ge) {
		t.Fatalf("wrong credentials: %v, want a *GitError", err)
	}
	if text := err.Error() + strings.Join(ge.Args, " ") + ge.Stderr; strings.Contains(text, "wrong-tok") {
		t.Errorf("the failure shows the password: %s", text)
	}
}

// A name is looked up once and git connects to that address: here the
// name exists only in the service's lookup, so the fetch works only if
// curl was pinned to the checked address.
func TestFetchIntoConnectsOnlyToTheCheckedAddress(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, func(c *Config) { c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	r, _ := mustCreate(t, s, "p")
	root := realDir(t)
	head := bareRepo(t, root, "repo")
	srv := githttptest.New(t, root, "", "")
	lookups := 0
	s.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		lookups++
		return fakeLookup(map[string][]string{"repo.atelier-test": {"127.0.0.1"}})(ctx, host)
	}
	_, port, _ := strings.Cut(srv.Host, ":")
	got, err := s.FetchInto(ctx, r, "http://repo.atelier-test:"+port+"/repo.git", false)
	if err != nil || got != head {
		t.Fatalf("FetchInto through the checked address: %s, %v", got, err)
	}
	if lookups != 1 || srv.Requests() == 0 {
		t.Errorf("%d lookups, %d requests; want 1 lookup and the fetch", lookups, srv.Requests())
	}

	// Without the operator's allowance the same source is refused before
	// git runs.
	s.allow = nil
	before := srv.Requests()
	if _, err := s.FetchInto(ctx, r, "http://repo.atelier-test:"+port+"/repo.git", false); !errors.Is(err, ErrSourceNotAllowed) {
		t.Errorf("loopback without allowance: %v, want ErrSourceNotAllowed", err)
	}
	if srv.Requests() != before {
		t.Error("a refused source was contacted")
	}
}

// A redirect could carry credentials to another host, or a fetch to an
// address nobody checked: none is followed.
func TestFetchIntoFollowsNoRedirect(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	root := realDir(t)
	bareRepo(t, root, "repo")
	target := githttptest.New(t, root, "", "")
	_, port, _ := strings.Cut(target.Host, ":")
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "http://localhost:"+port+req.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(redirector.Close)

	_, err := s.FetchInto(ctx, r, "http://u:s3cret@"+strings.TrimPrefix(redirector.URL, "http://")+"/repo.git", true)
	if err == nil {
		t.Fatal("a fetch followed a redirect")
	}
	if n := target.Requests(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

func TestSSHRunsWithoutRootsKeys(t *testing.T) {
	s := newService(t)
	env := strings.Join(s.environ(runOpts{}, nil), "\n")
	for _, want := range []string{"-F /dev/null", "BatchMode=yes", "IdentitiesOnly=yes", "IdentityFile=none", "IdentityAgent=none"} {
		if !strings.Contains(env, want) {
			t.Errorf("GIT_SSH_COMMAND lacks %s: %s", want, env)
		}
	}
	if strings.Contains(env, "SSH_AUTH_SOCK") {
		t.Error("git sees an ssh agent")
	}
}
