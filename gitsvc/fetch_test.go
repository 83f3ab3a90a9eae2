package gitsvc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSourceProtocol(t *testing.T) {
	tests := []struct {
		source     string
		allowLocal bool
		want       string // "" means refused
	}{
		{"https://github.com/o/r.git", false, "https"},
		{"https://user:tok@github.com/o/r.git", false, "https"},
		{"http://host/r", false, "http"},
		{"ssh://git@host:22/r", false, "ssh"},
		{"git+ssh://host/r", false, "ssh"},
		{"git://host/r", false, "git"},
		{"git@github.com:o/r.git", false, "ssh"},
		{"host:r.git", false, "ssh"},
		{"https://[::1]/r", false, "https"},
		{"/srv/r", true, "file"},
		{"file:///srv/r", true, "file"},

		{"/srv/r", false, ""},
		{"file:///srv/r", false, ""},
		{"ext::sh -c touch% /tmp/pwned", true, ""},
		{"fd::3", true, ""},
		{"foo::https://host/r", true, ""},
		{"--upload-pack=touch /tmp/x", true, ""},
		{"-oProxyCommand=x", true, ""},
		{"ssh://-oProxyCommand=x/r", false, ""},
		{"-host:r", false, ""},
		{"git@-host:r", false, ""},
		{"ftp://host/r", false, ""},
		{"relative/path", true, ""},
		{"r.git", true, ""},
		{"https://host/r\nx", false, ""},
		{"", true, ""},
	}
	for _, tt := range tests {
		got, err := sourceProtocol(tt.source, tt.allowLocal)
		if tt.want == "" {
			if !errors.Is(err, ErrBadArgument) {
				t.Errorf("sourceProtocol(%q, %v) = %q, %v; want ErrBadArgument", tt.source, tt.allowLocal, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("sourceProtocol(%q, %v) = %q, %v; want %q", tt.source, tt.allowLocal, got, err, tt.want)
		}
	}
}

func TestFetchIntoRefusesBeforeGitRuns(t *testing.T) {
	ctx := testContext(t)
	git, count := countingGit(t)
	s := newService(t, withGit(git))
	r, _ := mustCreate(t, s, "p")
	src := newRepo(t)
	pwned := filepath.Join(t.TempDir(), "pwned")

	for _, source := range []string{
		"ext::sh -c touch% " + pwned,
		"--upload-pack=touch " + pwned,
		src,
		"file://" + src,
	} {
		before := count()
		if _, err := s.FetchInto(ctx, r, source, false); !errors.Is(err, ErrBadArgument) {
			t.Errorf("FetchInto(%q): %v, want ErrBadArgument", source, err)
		}
		if n := count() - before; n != 0 {
			t.Errorf("FetchInto(%q) started %d git processes", source, n)
		}
	}
	if _, err := os.Stat(pwned); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused source ran a command")
	}
	if _, err := s.ResolveCommit(ctx, r, importRef); !errors.Is(err, ErrNotFound) {
		t.Errorf("import ref exists after refusals: %v", err)
	}
}

// Git itself enforces the transport list too, should a source ever get past
// sourceProtocol.
func TestGitEnforcesTheTransportList(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	src := newRepo(t)
	pwned := filepath.Join(t.TempDir(), "pwned")
	for _, tc := range []struct{ source, protocols, refused string }{
		{src, "https", "transport 'file' not allowed"},
		{src, "", "transport 'file' not allowed"},
		{"ext::sh -c touch% " + pwned, "https:ssh:git:http:file", "transport 'ext' not allowed"},
	} {
		c := newCommand("fetch", "--quiet", "--end-of-options").val(tc.source).lit("+HEAD:refs/x")
		_, err := s.run(ctx, c, runOpts{repo: r, protocols: tc.protocols})
		if !strings.Contains(stderrOf(err), tc.refused) {
			t.Errorf("fetch %q allowing %q: %v", tc.source, tc.protocols, err)
		}
	}
	if _, err := os.Stat(pwned); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("ext:: ran a command")
	}
}

func TestFetchIntoLocalAndImport(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, first := mustCreate(t, s, "p")
	src := newRepo(t)
	writeFile(t, filepath.Join(src, "more"), "more\n")
	tgit(t, src, "add", "more")
	tgit(t, src, "commit", "-q", "-m", "second")
	srcHead := tgit(t, src, "rev-parse", "HEAD")

	for _, source := range []string{src, "file://" + src} {
		got, err := s.FetchInto(ctx, r, source, true)
		if err != nil {
			t.Fatalf("FetchInto(%s): %v", source, err)
		}
		if got != srcHead {
			t.Errorf("FetchInto(%s) = %s, want %s", source, got, srcHead)
		}
	}
	if n := tgit(t, r.GitDir, "rev-list", "--count", importRef); n != "2" {
		t.Errorf("import has %s commits, want the source's 2", n)
	}

	tree, _, err := s.ListAll(ctx, r, srcHead)
	if err != nil {
		t.Fatal(err)
	}
	commit, err := s.CommitWithParents(ctx, r, tree, []string{first, srcHead}, "Import")
	if err != nil {
		t.Fatal(err)
	}
	if got := tgit(t, r.GitDir, "rev-list", "--parents", "-1", "main"); got != commit+" "+first+" "+srcHead {
		t.Errorf("main: %s", got)
	}
	if data, _, err := s.ReadBlob(ctx, r, commit, "more"); err != nil || string(data) != "more\n" {
		t.Errorf("imported file: %q, %v", data, err)
	}

	empty := realDir(t)
	tgit(t, empty, "init", "-q")
	if _, err := s.FetchInto(ctx, r, empty, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("fetch from a repository without commits: %v, want ErrNotFound", err)
	}
	if _, err := s.FetchInto(ctx, r, realDir(t), true); !errors.Is(err, ErrNotRepository) {
		t.Errorf("fetch from a plain folder: %v, want ErrNotRepository", err)
	}
}

func TestFetchIntoHidesCredentials(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	// Nothing listens on port 1: the fetch fails at once.
	_, err := s.FetchInto(ctx, r, "https://user:s3cret@127.0.0.1:1/r.git", true)
	if err == nil {
		t.Fatal("fetch from nowhere worked")
	}
	var ge *GitError
	if !errors.As(err, &ge) {
		t.Fatalf("err = %v, want a *GitError", err)
	}
	for what, text := range map[string]string{"error": err.Error(), "args": strings.Join(ge.Args, " "), "stderr": ge.Stderr} {
		if strings.Contains(text, "s3cret") {
			t.Errorf("%s shows the password: %s", what, text)
		}
	}
	if !strings.Contains(strings.Join(ge.Args, " "), "https://127.0.0.1:1/r.git") {
		t.Errorf("args %q do not show the sanitized URL", ge.Args)
	}
}
