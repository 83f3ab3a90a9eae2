package gitsvc

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"
)

func TestSanitizeURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://user:tok@host/r.git?x=1#f", "https://host/r.git"},
		{"https://tok@host/r.git", "https://host/r.git"},
		{"https://host/r.git", "https://host/r.git"},
		{"HTTPS://User:Pw@Host/R", "HTTPS://Host/R"},
		{"http://u:p@host:8080/r", "http://host:8080/r"},
		{"https://host?token=1", "https://host"},
		{"https://host#frag", "https://host"},
		{"https://u:p?w@host/r", "https://host/r"},             // '?' inside a password is stripped with it
		{"https://u:p#w@host/r", "https://host/r"},             // and '#'
		{"https://u:p@w@host/r", "https://host/r"},             // the last '@' ends the user part
		{"https://host/@scope/pkg", "https://host/@scope/pkg"}, // '@' in the path is not a user
		{"https://u:p@[2001:db8::1]:8443/r.git?x#y", "https://[2001:db8::1]:8443/r.git"},
		{"ssh://git@[::1]:22/r.git", "ssh://git@[::1]:22/r.git"},
		{"ssh://git@host:22/r", "ssh://git@host:22/r"},
		{"ssh://git:secret@host:22/r", "ssh://git@host:22/r"},
		{"git+ssh://u:p@host/r", "git+ssh://u@host/r"},
		{"git://host/r.git", "git://host/r.git"},
		{"git@host:r.git", "git@host:r.git"},
		{"git@github.com:org/repo.git", "git@github.com:org/repo.git"},
		{"file:///srv/r", "file:///srv/r"},
		{"/srv/r", "/srv/r"},
		{"../r", "../r"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := SanitizeURL(tt.in); got != tt.want {
			t.Errorf("SanitizeURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRemotes(t *testing.T) {
	ctx := testContext(t)
	repo := newRepo(t)
	tgit(t, repo, "remote", "add", "origin", "https://user:tok@github.com/org/repo.git?x=1#f")
	tgit(t, repo, "remote", "add", "upstream", "git@github.com:up/repo.git")
	tgit(t, repo, "config", "remote.upstream.pushurl", "https://tok@push.example.com/up/repo.git")
	tgit(t, repo, "remote", "add", "my.Fork", "ssh://git:pw@[2001:db8::1]:2222/fork.git")
	tgit(t, repo, "config", "--add", "remote.my.Fork.url", "https://second.example.com/fork.git")

	git, count := countingGit(t)
	s := newService(t, withGit(git))
	before := count()
	got, err := s.Remotes(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if n := count() - before; n > 2 {
		t.Errorf("%d git processes, want at most 2", n)
	}
	want := Remotes{IsRepo: true, Remotes: []Remote{
		{"origin", "https://github.com/org/repo.git", "https://github.com/org/repo.git"},
		{"upstream", "git@github.com:up/repo.git", "https://push.example.com/up/repo.git"},
		{"my.Fork", "ssh://git@[2001:db8::1]:2222/fork.git", "ssh://git@[2001:db8::1]:2222/fork.git"},
	}}
	if !got.IsRepo || !slices.Equal(got.Remotes, want.Remotes) {
		t.Errorf("Remotes =\n%+v\nwant\n%+v", got, want)
	}
	agreesWithGit(t, repo, got)

	// A worktree has its main repository's remotes.
	wt := filepath.Join(realDir(t), "wt")
	tgit(t, repo, "worktree", "add", "-q", "-b", "wt", wt)
	if fromWT, err := s.Remotes(ctx, wt); err != nil || !slices.Equal(fromWT.Remotes, got.Remotes) {
		t.Errorf("Remotes(worktree) = %+v, %v", fromWT, err)
	}
}

// agreesWithGit checks Remotes against `git remote get-url [--push]`, four
// processes a remote, sanitized.
func agreesWithGit(t *testing.T, repo string, got Remotes) {
	t.Helper()
	for _, rm := range got.Remotes {
		fetch := SanitizeURL(tgit(t, repo, "remote", "get-url", rm.Name))
		push := SanitizeURL(tgit(t, repo, "remote", "get-url", "--push", rm.Name))
		if rm.FetchURL != fetch || rm.PushURL != push {
			t.Errorf("%s: %q %q, git says %q %q", rm.Name, rm.FetchURL, rm.PushURL, fetch, push)
		}
	}
}

func TestRemotesRewrites(t *testing.T) {
	ctx := testContext(t)
	repo := newRepo(t)
	tgit(t, repo, "config", "url.https://github.com/.insteadOf", "gh:")
	tgit(t, repo, "config", "url.https://github.example/.insteadOf", "g")
	tgit(t, repo, "config", "url.ssh://git@github.com/.pushInsteadOf", "gh:")
	tgit(t, repo, "remote", "add", "a", "gh:org/a.git")
	tgit(t, repo, "remote", "add", "b", "gh:org/b.git")
	tgit(t, repo, "config", "remote.b.pushurl", "gh:org/b-push.git")
	tgit(t, repo, "remote", "add", "c", "https://u:p@plain.example/c.git")

	s := newService(t)
	got, err := s.Remotes(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	want := []Remote{
		{"a", "https://github.com/org/a.git", "ssh://git@github.com/org/a.git"},
		{"b", "https://github.com/org/b.git", "https://github.com/org/b-push.git"},
		{"c", "https://plain.example/c.git", "https://plain.example/c.git"},
	}
	if !slices.Equal(got.Remotes, want) {
		t.Errorf("Remotes =\n%+v\nwant\n%+v", got.Remotes, want)
	}
	agreesWithGit(t, repo, got)
}

func TestRemotesOfOtherFolders(t *testing.T) {
	ctx := testContext(t)
	git, count := countingGit(t)
	s := newService(t, withGit(git))

	before := count()
	got, err := s.Remotes(ctx, realDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := count() - before; n != 1 {
		t.Errorf("%d git processes for a plain folder, want 1", n)
	}
	if b, _ := json.Marshal(got); string(b) != `{"isRepo":false,"remotes":[]}` {
		t.Errorf("plain folder: %s", b)
	}

	got, err = s.Remotes(ctx, newRepo(t))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(got); string(b) != `{"isRepo":true,"remotes":[]}` {
		t.Errorf("repository without remotes: %s", b)
	}
}

func TestRemotesWithBrokenGit(t *testing.T) {
	ctx := testContext(t)
	repo := newRepo(t)
	plain := realDir(t)
	for name, git := range brokenGits(t) {
		t.Run(name, func(t *testing.T) {
			s := newService(t, withGit(git))
			for _, folder := range []string{repo, plain} {
				got, err := s.Remotes(ctx, folder)
				if err == nil || errors.Is(err, ErrNotRepository) {
					t.Errorf("Remotes(%s) = %+v, %v; want an error", folder, got, err)
				}
			}
		})
	}
}
