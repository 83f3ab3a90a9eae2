// Package hostilegit makes, for tests, a git folder that belongs to a host
// account and whose own config names a program at every place git looks for
// one, so a test can prove that none of them ever runs as root.
package hostilegit

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Owner is the account the folder belongs to: an unprivileged uid every
// Linux has (nobody), never a session's.
const Owner = 65534

// Git runs git for a fixture, isolated from the machine's config, and
// returns its stdout without the trailing newline.
func Git(t testing.TB, dir string, args ...string) string {
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

// Repo makes base/work, a git repository holding files with one commit,
// owned by Owner, whose config names a program as clean/smudge/process
// filter of every file, diff textconv and external diff, fsmonitor, pager,
// ssh command, askpass, credential helper and alternate-refs command, and
// as several hooks. Each program appends "<what> <uid> <groups>" to the log
// it returns. base and its parent are opened up so that Owner can reach the
// folder. The caller must be root.
func Repo(t testing.TB, base string, files map[string]string) (folder, log, head string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("precondition: giving a folder to another account needs root")
	}
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	marks := filepath.Join(base, "marks")
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(marks, 0o777) // past the umask: every account may leave a mark
	log = filepath.Join(marks, "log")
	mark := filepath.Join(base, "mark")
	if err := os.WriteFile(mark, []byte(`#!/bin/sh
echo "$1 $(id -u) $(id -G)" >> `+log+`
shift
if [ $# -gt 0 ] && [ -f "$1" ]; then exec cat "$1"; fi
exec cat
`), 0o755); err != nil {
		t.Fatal(err)
	}

	folder = filepath.Join(base, "work")
	Git(t, base, "init", "-q", "-b", "main", folder)
	all := map[string]string{".gitattributes": "* filter=evil diff=evil\n"}
	for name, body := range files {
		all[name] = body
	}
	for name, body := range all {
		p := filepath.Join(folder, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, folder, "add", ".")
	Git(t, folder, "commit", "-q", "-m", "first")
	for _, kv := range [][2]string{
		{"filter.evil.clean", mark + " clean"},
		{"filter.evil.smudge", mark + " smudge"},
		{"filter.evil.process", mark + " process"},
		{"diff.evil.textconv", mark + " textconv"},
		{"diff.external", mark + " external-diff"},
		{"core.fsmonitor", mark + " fsmonitor"},
		{"core.pager", mark + " pager"},
		{"core.sshCommand", mark + " ssh"},
		{"core.askPass", mark + " askpass"},
		{"credential.helper", "!" + mark + " credential"},
		{"core.alternateRefsCommand", mark + " alternate-refs"},
		{"remote.origin.url", "https://example.com/work.git"},
	} {
		Git(t, folder, "config", kv[0], kv[1])
	}
	for _, hook := range []string{"reference-transaction", "post-index-change", "pre-auto-gc", "post-checkout", "pre-commit"} {
		if err := os.WriteFile(filepath.Join(folder, ".git", "hooks", hook), []byte("#!/bin/sh\n"+mark+" hook-"+hook+" </dev/null >/dev/null\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	head = Git(t, folder, "rev-parse", "HEAD")
	Chown(t, folder, Owner)
	return folder, log, head
}

// Chown gives dir and everything below it to uid (and the group of the
// same number), without following links.
func Chown(t testing.TB, dir string, uid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Marks returns the lines of the log: the programs that ran, and as whom.
func Marks(t testing.TB, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// NotAsOwner lists the marks of programs that ran as anyone but Owner.
func NotAsOwner(t testing.TB, log string) []string {
	t.Helper()
	var bad []string
	for _, m := range Marks(t, log) {
		if f := strings.Fields(m); len(f) < 2 || f[1] != strconv.Itoa(Owner) {
			bad = append(bad, m)
		}
	}
	return bad
}
