package views

import (
	"net/url"
	"strings"
	"testing"
)

// A name stays one value whatever it holds: it never adds a parameter, ends
// the path early or starts a fragment.
func TestURLKeepsNamesWhole(t *testing.T) {
	names := []string{"b+c.txt", "a&path=README.md", "x#y.txt", "50%.txt", "sp ace.txt", "ü.txt", "dir/a?b.txt", "..", ""}
	for _, name := range names {
		link := URL("/projects", 3, "code", "file").Query("path", name).String()
		u, err := url.Parse(link)
		if err != nil {
			t.Fatalf("%q: %v", link, err)
		}
		if u.Path != "/projects/3/code/file" || u.Fragment != "" || len(u.Query()) != 1 || u.Query().Get("path") != name {
			t.Errorf("%q gave %q: path %q, query %v, fragment %q", name, link, u.Path, u.Query(), u.Fragment)
		}
		if name == "" || name == ".." {
			continue // not a segment: see URL
		}
		seg := URL("/projects", 3, "members", name).String()
		if u, err := url.Parse(seg); err != nil || u.RawQuery != "" || u.Fragment != "" || strings.Count(u.EscapedPath(), "/") != 4 {
			t.Errorf("segment %q gave %q (%v)", name, seg, err)
		} else if got := strings.TrimPrefix(u.Path, "/projects/3/members/"); got != name {
			t.Errorf("segment %q came back as %q", name, got)
		}
	}
}

func TestURLShapes(t *testing.T) {
	base := URL("/projects", int64(7), "sessions", "edit_ab")
	for _, tc := range []struct {
		got  Link
		want string
	}{
		{URL("/projects"), "/projects"},
		{URL("/projects", 7), "/projects/7"},
		{URL(base, "tree"), "/projects/7/sessions/edit_ab/tree"},
		{URL(base.String(), "tree"), "/projects/7/sessions/edit_ab/tree"},
		{URL(base).Query("path", "a b"), "/projects/7/sessions/edit_ab?path=a+b"},
		{URL("/x").Query("path", "p", "download", 1), "/x?download=1&path=p"},
		{URL("/x").Query("a", 1).Query("a", 2), "/x?a=1&a=2"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
