package server

import (
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"atelier/models"
)

// localOwner is the host account that owns the hostile Local folder: an
// unprivileged uid that every Linux has, never a session's.
const localOwner = 65534

// fixtureGit runs git for a test's fixture, isolated from the machine's
// config, and returns its stdout without the trailing newline.
func fixtureGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x"}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = errors.New(err.Error() + ": " + string(ee.Stderr))
		}
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// hostileLocalFolder makes a git folder owned by localOwner whose own
// config names a program at every place git looks for one (filters on
// every file, textconv, external diff, fsmonitor, hooks, pager, ssh,
// askpass, credential helper). Each appends "<what> <uid>" to the log it
// returns, with the commit HEAD is at.
func hostileLocalFolder(t *testing.T) (folder, log, head string) {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil { // the owner reaches its folder
			t.Fatal(err)
		}
	}
	marks := filepath.Join(base, "marks")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(marks, 0o777)
	log = filepath.Join(marks, "log")
	mark := filepath.Join(base, "mark")
	if err := os.WriteFile(mark, []byte(`#!/bin/sh
echo "$1 $(id -u)" >> `+log+`
shift
if [ $# -gt 0 ] && [ -f "$1" ]; then exec cat "$1"; fi
exec cat
`), 0o755); err != nil {
		t.Fatal(err)
	}
	folder = filepath.Join(base, "work")
	fixtureGit(t, base, "init", "-q", "-b", "main", folder)
	for name, body := range map[string]string{
		".gitattributes": "* filter=evil diff=evil\n",
		"README.md":      "# Hostile\n",
		"src/app.py":     "print('hi')\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(folder, name)), 0o755)
		if err := os.WriteFile(filepath.Join(folder, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixtureGit(t, folder, "add", ".")
	fixtureGit(t, folder, "commit", "-q", "-m", "first")
	for _, kv := range [][2]string{
		{"filter.evil.clean", mark + " clean"},
		{"filter.evil.smudge", mark + " smudge"},
		{"diff.evil.textconv", mark + " textconv"},
		{"diff.external", mark + " external-diff"},
		{"core.fsmonitor", mark + " fsmonitor"},
		{"core.pager", mark + " pager"},
		{"core.sshCommand", mark + " ssh"},
		{"core.askPass", mark + " askpass"},
		{"credential.helper", "!" + mark + " credential"},
		{"remote.origin.url", "https://example.com/work.git"},
	} {
		fixtureGit(t, folder, "config", kv[0], kv[1])
	}
	for _, hook := range []string{"reference-transaction", "post-index-change", "pre-auto-gc", "post-checkout"} {
		if err := os.WriteFile(filepath.Join(folder, ".git", "hooks", hook), []byte("#!/bin/sh\n"+mark+" hook-"+hook+" </dev/null >/dev/null\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	head = fixtureGit(t, folder, "rev-parse", "HEAD")
	err := filepath.WalkDir(folder, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, localOwner, localOwner)
	})
	if err != nil {
		t.Fatal(err)
	}
	return folder, log, head
}

// rootRan lists the marks of programs that ran as anyone but the owner.
func rootRan(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, m := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasSuffix(m, " 65534") {
			bad = append(bad, m)
		}
	}
	return bad
}

// A Local git folder that belongs to a host account and whose config
// names programs everywhere: every page of it, its remotes and an edit
// session on it work, and none of those programs ever runs as root.
func TestLocalGitRunsAsOwner(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	admin := h.user("admin", true)
	folder, log, head := hostileLocalFolder(t)

	res := admin.post("/projects", url.Values{"name": {"hostile"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	p := "/projects/" + itoa(id)

	for _, path := range []string{p, p + "/code", p + "/code/tree", p + "/code/tree?path=src",
		p + "/code/file?path=README.md", p + "/code/raw?path=src/app.py"} {
		for _, hdr := range []header{nil, {"HX-Request": "true"}, jsonAccept} {
			if res := admin.get(path, hdr); res.StatusCode/100 != 2 {
				t.Errorf("GET %s (%v): %d %s", path, hdr, res.StatusCode, readBody(res))
			}
		}
	}
	doc := admin.page(p + "/code")
	if got := doc.Find("#code-head .badge").First().Text(); got != "main" {
		t.Errorf("Code page branch %q, want main", got)
	}
	rs := decode[struct {
		IsRepo  bool
		Remotes []struct{ Name string }
	}](t, admin.get(p+"/remotes", jsonAccept))
	if !rs.IsRepo || len(rs.Remotes) != 1 || rs.Remotes[0].Name != "origin" {
		t.Errorf("remotes %+v", rs)
	}

	// An edit session forks the folder's repository at its HEAD and reads,
	// saves and diffs through the fork; a command checks the fork out.
	s, sbase := admin.session(id)
	if s.BaseCommit != head {
		t.Errorf("session base %s, want HEAD %s", s.BaseCommit, head)
	}
	if body, _, status := admin.read(sbase, "src/app.py"); status != http.StatusOK || !strings.Contains(body, "print") {
		t.Errorf("session read: %d %s", status, body)
	}
	if res := admin.get(sbase+"/tree", jsonAccept); res.StatusCode != http.StatusOK {
		t.Errorf("session tree: %d %s", res.StatusCode, readBody(res))
	}
	if res := admin.put(sbase, "src/app.py", []byte("print('edited')\n"), nil); res.StatusCode/100 != 2 {
		t.Errorf("session save: %d %s", res.StatusCode, readBody(res))
	}
	if diff := readBody(admin.get(sbase+"/diff?path=src/app.py", nil)); !strings.Contains(diff, "+print('edited')") {
		t.Errorf("session diff:\n%s", diff)
	}
	out, res := admin.run(sbase, "cat README.md src/app.py", "")
	if res.StatusCode != http.StatusOK || out.ExitCode != 0 || out.Stdout != "# Hostile\nprint('edited')\n" {
		t.Errorf("command in the session: %d %+v %s", res.StatusCode, out, readBody(res))
	}

	if bad := rootRan(t, log); len(bad) > 0 {
		t.Fatalf("programs of the folder's config ran as root: %q", bad)
	}
	// What the server left in the folder belongs to its owner.
	err := filepath.WalkDir(folder, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := os.Lstat(path); err == nil && fileUID(fi) != localOwner {
			t.Errorf("%s belongs to uid %d, not the folder's owner", path, fileUID(fi))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileUID(fi fs.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }
