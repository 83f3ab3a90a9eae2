package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"atelier/fault"
)

// importRef receives the source's HEAD in FetchInto.
const importRef = "refs/atelier/import"

// FetchInto fetches the HEAD of source, with its history, into r as
// refs/atelier/import, under r's write lock, and returns that commit.
//
// source is an https, http or git URL, for trusted callers (site admins)
// also an ssh URL, scp-style user@host:path, an absolute path on this
// server or a file:// URL: such a source can read any repository the server
// can. Remote helpers (ext::, fd::, any "<transport>::"), other schemes,
// relative paths and anything starting with '-' are ErrBadArgument, before
// git runs; git is also told to allow only the one transport the source
// needs (GIT_ALLOW_PROTOCOL).
//
// For others, a source whose host is or resolves to an address netblock
// refuses (loopback, private, link-local, reserved, one of the server's own
// or on a network it is attached to, in any IPv6 form) is
// ErrSourceNotAllowed unless Config.AllowNetworks lists it, and git
// connects only to the addresses checked. ssh is ErrSourceNotAllowed too.
// A host that does not resolve is ErrUnreachable.
//
// A user and password in an http(s) URL reach git through a credential
// helper reading a pipe, never through its arguments or environment, and
// no redirect is followed, so they go to the host named and nowhere else.
// A source without a HEAD is ErrNotFound.
func (s *Service) FetchInto(ctx context.Context, r *Repo, source string, trusted bool) (sourceHead string, err error) {
	src, err := s.prepareSource(ctx, source, trusted)
	if err != nil {
		return "", err
	}
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer release()
	o := runOpts{repo: r, protocols: src.protocol, config: []string{"http.followRedirects=false"}}
	if src.resolve != "" {
		o.config = append(o.config, "http.curloptResolve="+src.resolve)
	}
	if src.credentials != nil {
		rd, wr, err := os.Pipe()
		if err != nil {
			return "", fmt.Errorf("gitsvc: credentials pipe: %w", err)
		}
		defer rd.Close()
		// They fit the pipe's buffer (maxCredentials), so writing cannot
		// wait for a reader.
		_, err = wr.Write(src.credentials)
		if cerr := wr.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("gitsvc: credentials pipe: %w", err)
		}
		o.extraFiles = []*os.File{rd}
		// The empty value drops any helper configured before this one.
		o.config = append(o.config, "credential.helper=", "credential.helper="+credentialHelper)
	}
	c := newCommand("fetch", "--quiet", "--no-tags", "--no-recurse-submodules",
		"--no-auto-maintenance", "--no-write-fetch-head", "--end-of-options").
		url(src.url).lit("+HEAD:" + importRef)
	_, err = s.run(ctx, c, o)
	if err != nil {
		// What git writes back may quote the host, which may quote the
		// credentials it was sent.
		var ge *GitError
		if errors.As(err, &ge) {
			ge.Stderr = withoutSecrets(ge.Stderr, src.url, src.secrets)
		}
		msg := stderrOf(err)
		switch {
		case strings.Contains(msg, "couldn't find remote ref HEAD"):
			return "", fmt.Errorf("gitsvc: fetch %s: no HEAD: %w: %w", SanitizeURL(source), ErrNotFound, err)
		case strings.Contains(msg, "does not appear to be a git repository"):
			return "", fmt.Errorf("gitsvc: fetch %s: %w: %w", SanitizeURL(source), ErrNotRepository, err)
		}
		return "", err
	}
	return s.resolve(ctx, r, importRef+"^{commit}")
}

// sourceProtocol classifies source the way git will and returns the one
// transport it may use, or ErrBadArgument.
func sourceProtocol(source string, trusted bool) (string, error) {
	refuse := func(why string) (string, error) {
		return "", fault.Detailf(ErrBadArgument, ": source %q: %s", SanitizeURL(source), why)
	}
	if err := checkValue(source); err != nil {
		return "", err
	}
	if strings.ContainsFunc(source, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return refuse("control character")
	}
	// Git reads "<transport>::<address>" as a remote helper: ext:: runs a
	// command, fd:: talks to a descriptor. None is allowed.
	if i := strings.Index(source, "::"); i > 0 && isScheme(source[:i]) {
		return refuse("remote helpers are not allowed")
	}
	if scheme, rest, ok := strings.Cut(source, "://"); ok && isScheme(scheme) {
		var protocol string
		switch strings.ToLower(scheme) {
		case "https", "http", "git":
			protocol = strings.ToLower(scheme)
		case "ssh", "git+ssh", "ssh+git":
			protocol = "ssh"
		case "file":
			if !trusted {
				return refuse("local repositories are not allowed")
			}
			return "file", nil
		default:
			return refuse("scheme " + scheme + " is not allowed")
		}
		host, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndexByte(host, '@'); at >= 0 {
			host = host[at+1:]
		}
		if host == "" || host[0] == '-' {
			return refuse("bad host")
		}
		return protocol, nil
	}
	if filepath.IsAbs(source) {
		if !trusted {
			return refuse("local repositories are not allowed")
		}
		return "file", nil
	}
	// scp-style [user@]host:path: a colon before any slash.
	if i := strings.IndexByte(source, ':'); i > 0 && !strings.Contains(source[:i], "/") {
		host := source[:i]
		if at := strings.LastIndexByte(host, '@'); at >= 0 {
			host = host[at+1:]
		}
		if host == "" || host[0] == '-' {
			return refuse("bad host")
		}
		return "ssh", nil
	}
	return refuse("not a URL or an absolute path")
}

// isScheme reports whether s could be a URL scheme as git sees one: a
// letter or digit, then letters, digits, '+', '-' and '.'.
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '+' && c != '-' && c != '.') {
			return false
		}
	}
	return true
}
