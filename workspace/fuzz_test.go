package workspace

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The server folders the fuzz target guards; "/" must be ignored.
var fuzzServer = []string{"/srv/app", "/opt/atelier/bin", "/data/atelier", "/"}

const fuzzRoot = "/srv/atelier/workspaces"

// FuzzCheckLexical checks every path CheckLexical accepts against the rules
// restated a second way: by splitting on "/" and comparing lists of parts.
func FuzzCheckLexical(f *testing.F) {
	for _, s := range []string{
		"/", "", "a", "/etc", "/etc/x", "/etcetera", "/srv/app", "/srv/application",
		"/srv/app/x", "/srv", "/srv/atelier", "/srv/atelier/workspaces/p", "/srv/code/app",
		"/home/u/../../etc", "//home", "/home/", "/home/./u", "/a\x00b", "/var/tmp/x",
		"/var/lib", "/var/www", "/lib64", "/library", "/libx32/x", "/proc/self/cwd",
		"/data", "/data/atelier/x", "/opt/atelier", "/opt/code", "/home/u/code", "/tmp",
		"/tmp/x", "/mnt/../etc", "/.", "/..", "/x/..", "\\etc", "/root", "/rootless",
	} {
		f.Add(s)
	}
	w, err := New(fuzzRoot, fuzzServer, LocalPolicy{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	reasons := []string{ReasonNotAbsolute, ReasonNotClean, ReasonSystem, ReasonOverlapsServer}
	f.Fuzz(func(t *testing.T, p string) {
		err := w.CheckLexical(p)
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) || !slices.Contains(reasons, pe.Reason) || pe.Path != p {
				t.Fatalf("CheckLexical(%q) = %v: want a lexical *PathError for the same path", p, err)
			}
			return
		}
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("accepted %q: not absolute", p)
		}
		if strings.ContainsRune(p, 0) {
			t.Fatalf("accepted %q: contains NUL", p)
		}
		if filepath.Clean(p) != p {
			t.Fatalf("accepted %q: not clean", p)
		}
		parts := strings.Split(p, "/")[1:]
		for _, part := range parts {
			if part == "" || part == "." || part == ".." {
				t.Fatalf("accepted %q: has an empty, . or .. component", p)
			}
		}
		if refusedSystem(parts) {
			t.Fatalf("accepted %q: a system folder", p)
		}
		for _, s := range append([]string{fuzzRoot}, fuzzServer...) {
			sp := strings.Split(s, "/")[1:]
			if s == "/" {
				continue
			}
			if isPrefix(parts, sp) || isPrefix(sp, parts) {
				t.Fatalf("accepted %q: overlaps server folder %s", p, s)
			}
		}
		// What the guard accepts, a stored row may hold.
		if root, err := w.ScopeRoot(Location{DirName: "x", Mode: Local, Path: p}); err != nil || root != p {
			t.Fatalf("ScopeRoot refuses %q accepted by CheckLexical: %q, %v", p, root, err)
		}
	})
}

// refusedSystem restates the system list over path components.
func refusedSystem(parts []string) bool {
	whole := []string{"etc", "proc", "sys", "dev", "boot", "usr", "bin", "sbin", "root", "run", "snap"}
	exact := [][]string{{"home"}, {"mnt"}, {"media"}, {"opt"}, {"srv"}, {"tmp"}, {"var"}, {"var", "tmp"}}
	underVar := []string{"lib", "log", "cache", "spool", "run"}
	if len(parts) == 0 {
		return true // "/"
	}
	if slices.Contains(whole, parts[0]) || len(parts[0]) >= 3 && parts[0][:3] == "lib" {
		return true
	}
	if parts[0] == "var" && len(parts) >= 2 && slices.Contains(underVar, parts[1]) {
		return true
	}
	for _, e := range exact {
		if slices.Equal(parts, e) {
			return true
		}
	}
	return false
}

// isPrefix reports whether the component list pre starts list.
func isPrefix(list, pre []string) bool {
	return len(pre) <= len(list) && slices.Equal(list[:len(pre)], pre)
}
