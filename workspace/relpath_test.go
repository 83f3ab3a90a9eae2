package workspace

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckRelPath(t *testing.T) {
	tests := []struct {
		name string
		path string
		why  string // a substring of the refusal; "" means accepted
	}{
		{"parent", "../x", ".. component"},
		{"parent deeper than it went down", "a/../../x", ".. component"},
		{"parent that stays inside", "a/../b", ".. component"},
		{"absolute", "/etc/passwd", "absolute"},
		{"git config", ".git/config", ".git"},
		{"git folder deeper", "a/.git/HEAD", ".git"},
		{"git folder itself", ".git", ".git"},
		{"git upper case", ".GIT/x", ".git"},
		{"git mixed case", "a/.Git/config", ".git"},
		{"git trailing dot", ".git./config", ".git"},
		{"git trailing space", "a/.git /config", ".git"},
		{"git short name", "GIT~1/config", ".git"},
		{"git with an HFS+ ignorable", ".g\u200cit/config", ".git"},
		{"git with a byte order mark", "\ufeff.git/config", ".git"},
		{"dot inside", "a/./b", ". component"},
		{"dot alone", ".", ". component"},
		{"dot dot alone", "..", ".. component"},
		{"NUL", "a\x00b", "NUL"},
		{"NUL after a valid name", "src/main.go\x00.png", "NUL"},
		{"too long", strings.Repeat("a/", 2500), "5000 bytes"},
		{"invalid UTF-8", "a/\xff\xfe", "UTF-8"},
		{"lone continuation byte", "\x80", "UTF-8"},
		{"doubled slash", "a//b", "empty component"},
		{"trailing slash", "a/", "empty component"},
		{"empty", "", "empty"},

		{"percent encoded dots are a name", "%2e%2e/x", ""},
		{"backslash is a byte", `..\x`, ""},
		{"backslash in the middle", `a\..\..\b`, ""},
		{"source file", "src/main.go", ""},
		{"space", "a b/c.txt", ""},
		{"non-ASCII", "ünï/cødé", ""},
		{"gitignore", ".gitignore", ""},
		{"github folder", ".github/workflows/ci.yml", ""},
		{"git inside a name", "a.git/x", ""},
		{"dots in a name", "...", ""},
		{"dot file", ".env", ""},
		{"exactly the limit", strings.Repeat("a", MaxRelPath), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRelPath(tt.path)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("CheckRelPath(%.60q) = %v, want nil", tt.path, err)
				}
				if err := CheckRelDir(tt.path); err != nil {
					t.Fatalf("CheckRelDir(%.60q) = %v, want nil", tt.path, err)
				}
				return
			}
			if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("CheckRelPath(%.60q) = %v, want ErrBadPath saying %q", tt.path, err, tt.why)
			}
			if tt.path == "" {
				return
			}
			if err := CheckRelDir(tt.path); !errors.Is(err, ErrBadPath) {
				t.Fatalf("CheckRelDir(%.60q) = %v, want ErrBadPath", tt.path, err)
			}
		})
	}
}

// TestCheckNewPath: a path that enters a project passes CheckRelPath and
// has no name a person cannot read as it is; CheckRelPath keeps reading
// those names.
func TestCheckNewPath(t *testing.T) {
	tests := []struct {
		path string
		why  string // a substring of the refusal; "" means accepted
	}{
		{"a\nb.txt", "control character"},
		{"\x1b[31mred", "control character"},
		{"src/esc\x1b]0;title\x07", "control character"},
		{"tab\there", "control character"},
		{"bell\a", "control character"},
		{"\x01", "control character"},
		{"del\x7f", "control character"},
		{"c1\u0085next-line", "control character"},
		{"c1\u009bcsi", "control character"},
		{"c1\u0080", "control character"},
		{"evil\u202etxt.exe", "bidirectional"},
		{"\u202aleft", "bidirectional"},
		{"\u202bright", "bidirectional"},
		{"\u202cpop", "bidirectional"},
		{"\u202dlro", "bidirectional"},
		{"iso\u2066late", "bidirectional"},
		{"iso\u2067late", "bidirectional"},
		{"iso\u2068late", "bidirectional"},
		{"pop\u2069", "bidirectional"},
		{"   ", "white space"},
		{" ", "white space"},
		{"src/   /x.go", "white space"},
		{"\u00a0\u3000", "white space"},
		{"../x", ".. component"}, // CheckRelPath's rules hold too
		{"a//b", "empty component"},
		{".git/config", ".git"},

		{"src/main.go", ""},
		{"a b.txt", ""},
		{" leading and trailing ", ""},
		{"ünï/cødé", ""},
		{"\u00a0nbsp inside", ""},
		{"\u00a0", "white space"},
		{"right\u200fmark", ""}, // a mark, not an override: it reorders nothing after it
		{"\u00a1\u00ff", ""},    // just past C1
		{"\u2065\u206a", ""},    // either side of the isolates
	}
	for _, tt := range tests {
		err := CheckNewPath(tt.path)
		if tt.why == "" {
			if err != nil {
				t.Errorf("CheckNewPath(%q) = %v, want nil", tt.path, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("CheckNewPath(%q) = %v, want ErrBadPath saying %q", tt.path, err, tt.why)
		}
		// What is already there stays readable unless it could not be
		// read at all.
		if strings.Contains(tt.why, "component") || tt.why == ".git" {
			continue
		}
		if err := CheckRelPath(tt.path); err != nil {
			t.Errorf("CheckRelPath(%q) = %v: a name that exists must stay readable", tt.path, err)
		}
	}
}

// The root may be listed; it is never a file.
func TestCheckRelDirRoot(t *testing.T) {
	if err := CheckRelDir(""); err != nil {
		t.Errorf("CheckRelDir(\"\") = %v, want nil", err)
	}
	if err := CheckRelPath(""); !errors.Is(err, ErrBadPath) {
		t.Errorf("CheckRelPath(\"\") = %v, want ErrBadPath", err)
	}
}

// A refused path of any length gives a message of bounded size.
func TestBadPathMessageIsShort(t *testing.T) {
	err := CheckRelPath("/" + strings.Repeat("x", 10000))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("message of %d bytes: %.80v", len(err.Error()), err)
	}
}

// FuzzCheckRelPath restates what an accepted path looks like by other means
// (splitting on "/", lower-casing, filepath.Join) and checks that every
// refusal wraps ErrBadPath.
func FuzzCheckRelPath(f *testing.F) {
	for _, s := range []string{
		"", ".", "..", "../x", "a/../../x", "/etc/passwd", ".git/config", "a/.git/HEAD",
		"a/./b", "%2e%2e/x", "a\x00b", "a//b", "a/", ".GIT/x", "src/main.go", "a b/c.txt",
		"ünï/cødé", `..\x`, ".gitignore", ".git.", "GIT~1", ".g\u200dit", "\xff", "a/b/c/d",
		"\a\b\f\t\n\r\v\x7f\u2028\ufffd", strings.Repeat("a", 4096),
	} {
		f.Add(s)
	}
	// Paths refused for their length are seeded: when the fuzzer finds its
	// own, minimizing a several-kilobyte input stalls most of a short run.
	f.Add(strings.Repeat("a", 4097))
	f.Add(strings.Repeat("\a", 5000))
	f.Fuzz(func(t *testing.T, p string) {
		err := CheckRelPath(p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("CheckRelPath(%q) = %v: does not wrap ErrBadPath", p, err)
			}
			return
		}
		if len(p) > 4096 {
			t.Fatalf("accepted %d bytes", len(p))
		}
		if !utf8.ValidString(p) {
			t.Fatalf("accepted %q: not UTF-8", p)
		}
		for i := 0; i < len(p); i++ {
			if p[i] == 0 {
				t.Fatalf("accepted %q: NUL at %d", p, i)
			}
		}
		for _, part := range strings.Split(p, "/") {
			switch strings.ToLower(part) {
			case "", ".", "..", ".git":
				t.Fatalf("accepted %q: component %q", p, part)
			}
		}
		const root = "/r"
		if j := filepath.Join(root, p); j != root+"/"+p || !strings.HasPrefix(j, root+"/") {
			t.Fatalf("accepted %q: joined to %s gives %s", p, root, j)
		}
		if err := CheckRelDir(p); err != nil {
			t.Fatalf("CheckRelDir refuses %q accepted by CheckRelPath: %v", p, err)
		}
	})
}
