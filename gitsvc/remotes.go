package gitsvc

import (
	"bytes"
	"context"
	"errors"
	"strings"
)

// Remote is one configured remote; URLs are sanitized (SanitizeURL).
type Remote struct {
	Name     string `json:"name"`
	FetchURL string `json:"fetchUrl"`
	PushURL  string `json:"pushUrl"`
}

// Remotes answers whether a folder is a repository and which remotes it has.
type Remotes struct {
	IsRepo  bool     `json:"isRepo"`
	Remotes []Remote `json:"remotes"`
}

// remoteKeys selects remote URLs and the url.<base>.insteadOf rewrites git
// applies to them, in one config call.
const remoteKeys = `^(remote\..+\.(url|pushurl)|url\..+\.(insteadof|pushinsteadof))$`

// Remotes reads the remotes of the repository at folder with at most two git
// processes whatever their number: OpenLocal's rev-parse, then one `git
// config --get-regexp` under the read lock. A folder that is no repository
// (git's exit 128 with its message) is IsRepo false; any other failure is an
// error.
//
// The URLs are what `git remote get-url [--push]` would say: the first url
// line, insteadOf rewrites applied; the push URL is the first pushurl, else
// the first pushInsteadOf rewrite of a url, else the fetch URL.
func (s *Service) Remotes(ctx context.Context, folder string) (Remotes, error) {
	r, err := s.OpenLocal(ctx, folder)
	if errors.Is(err, ErrNotRepository) {
		return Remotes{Remotes: []Remote{}}, nil
	}
	if err != nil {
		return Remotes{}, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return Remotes{}, err
	}
	defer release()
	c := newCommand("config", "--null", "--get-regexp", remoteKeys)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if exitCode(err) == 1 && len(out) == 0 {
		return Remotes{IsRepo: true, Remotes: []Remote{}}, nil // no remotes
	}
	if err != nil {
		return Remotes{}, err
	}
	return Remotes{IsRepo: true, Remotes: parseRemotes(out)}, nil
}

type rewrite struct{ base, prefix string }

type remoteURLs struct {
	name          string
	urls, pushurl []string
}

// parseRemotes reads `config --null --get-regexp` output: "key\nvalue\0"
// records. Section and variable names come lowercased; a subsection (the
// remote's name, a rewrite's base) keeps its case and may hold dots, never
// a newline.
func parseRemotes(out []byte) []Remote {
	var (
		order     []*remoteURLs
		byName    = map[string]*remoteURLs{}
		insteadOf []rewrite
		pushOf    []rewrite
	)
	for _, rec := range bytes.Split(out, []byte{0}) {
		key, value, ok := strings.Cut(string(rec), "\n")
		if !ok {
			continue
		}
		if rest, ok := strings.CutPrefix(key, "url."); ok {
			if base, ok := strings.CutSuffix(rest, ".pushinsteadof"); ok {
				pushOf = append(pushOf, rewrite{base, value})
			} else if base, ok := strings.CutSuffix(rest, ".insteadof"); ok {
				insteadOf = append(insteadOf, rewrite{base, value})
			}
			continue
		}
		rest, ok := strings.CutPrefix(key, "remote.")
		if !ok {
			continue
		}
		name, push := strings.CutSuffix(rest, ".pushurl")
		if !push {
			if name, ok = strings.CutSuffix(rest, ".url"); !ok {
				continue
			}
		}
		rm := byName[name]
		if rm == nil {
			rm = &remoteURLs{name: name}
			byName[name] = rm
			order = append(order, rm)
		}
		if push {
			rm.pushurl = append(rm.pushurl, value)
		} else {
			rm.urls = append(rm.urls, value)
		}
	}

	remotes := make([]Remote, 0, len(order))
	for _, rm := range order {
		var fetch, push string
		if len(rm.urls) > 0 {
			fetch = rewriteURL(rm.urls[0], insteadOf)
		}
		switch {
		case len(rm.pushurl) > 0:
			push = rewriteURL(rm.pushurl[0], insteadOf)
		default:
			push = fetch
			for _, u := range rm.urls {
				if p := rewriteURL(u, pushOf); p != u {
					push = p
					break
				}
			}
		}
		remotes = append(remotes, Remote{Name: rm.name, FetchURL: SanitizeURL(fetch), PushURL: SanitizeURL(push)})
	}
	return remotes
}

// rewriteURL applies the rewrite with the longest matching prefix, the
// first one of equal length, as git does.
func rewriteURL(u string, rws []rewrite) string {
	best := -1
	for i, rw := range rws {
		if strings.HasPrefix(u, rw.prefix) && (best < 0 || len(rw.prefix) > len(rws[best].prefix)) {
			best = i
		}
	}
	if best < 0 {
		return u
	}
	return rws[best].base + u[len(rws[best].prefix):]
}

// SanitizeURL removes what must not be shown from a repository URL: the
// whole user part of an http(s) or ftp(s) URL (user:password@ or a bare
// token@), the password of any other URL (ssh://git@host:22/r keeps git@
// and the port), and query strings and fragments. SCP-style addresses
// (git@host:org/repo.git) and local paths come back unchanged. The user
// part ends at the last '@' before the first '/', as URL syntax has it.
func SanitizeURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !isScheme(scheme) {
		return raw
	}
	auth, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		auth, path = rest[:i], rest[i:]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		user, host := auth[:at], auth[at+1:]
		switch strings.ToLower(scheme) {
		case "http", "https", "ftp", "ftps":
			user = ""
		default:
			user, _, _ = strings.Cut(user, ":")
		}
		auth = host
		if user != "" {
			auth = user + "@" + host
		}
	}
	if i := strings.IndexAny(auth, "?#"); i >= 0 {
		auth, path = auth[:i], ""
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	return scheme + "://" + auth + path
}
