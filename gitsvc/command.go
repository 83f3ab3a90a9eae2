package gitsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"atelier/fault"
	"atelier/internal/txwatch"
)

// lit is an argument written in this package: an option, a constant ref
// name. Untyped string constants convert to it silently, a string variable
// does not, so a user's value cannot become an option without a visible
// conversion.
type lit string

// command is one git invocation being built. A bad value is remembered and
// reported by run, before any process starts.
type command struct {
	args  []string // what git receives
	shown []string // what errors and logs show: URLs without credentials
	err   error
}

func newCommand(sub lit, opts ...lit) *command {
	c := &command{}
	return c.lit(sub).lit(opts...)
}

func (c *command) lit(args ...lit) *command {
	for _, a := range args {
		c.args = append(c.args, string(a))
		c.shown = append(c.shown, string(a))
	}
	return c
}

// val appends a value that came from a user or a caller: it may not be empty,
// start with '-' or hold a NUL. Callers also put it after --end-of-options or
// "--" where git has them; the check keeps older habits of git safe too.
func (c *command) val(v string) *command {
	if err := checkValue(v); err != nil && c.err == nil {
		c.err = err
	}
	c.args = append(c.args, v)
	c.shown = append(c.shown, v)
	return c
}

// url is val for a repository URL, shown without its credentials.
func (c *command) url(v string) *command {
	c.val(v)
	c.shown[len(c.shown)-1] = SanitizeURL(v)
	return c
}

func checkValue(v string) error {
	switch {
	case v == "":
		return fault.Detailf(ErrBadArgument, ": empty value")
	case v[0] == '-':
		return fault.Detailf(ErrBadArgument, ": %q starts with '-'", SanitizeURL(v))
	case strings.IndexByte(v, 0) >= 0:
		return fault.Detailf(ErrBadArgument, ": value holds a NUL byte")
	}
	return nil
}

// scrub replaces values shown differently (URLs with credentials) in text
// git wrote, such as stderr.
func (c *command) scrub(text string) string {
	for i, a := range c.args {
		if a != c.shown[i] {
			text = strings.ReplaceAll(text, a, c.shown[i])
		}
	}
	return text
}

// GitError is a git process that failed: it exited non-zero, could not
// start, was killed at its timeout or wrote more than allowed.
type GitError struct {
	Args     []string // arguments after the binary, credentials removed
	ExitCode int      // -1 when git did not exit on its own
	Stderr   string   // the end of stderr, bounded
	Err      error    // the cause: *exec.ExitError, a start error, context.DeadlineExceeded...
}

func (e *GitError) Error() string {
	var b strings.Builder
	b.WriteString("gitsvc: git")
	if sub := e.subcommand(); sub != "" {
		b.WriteString(" " + sub)
	}
	b.WriteString(": ")
	if e.ExitCode >= 0 {
		fmt.Fprintf(&b, "exit status %d", e.ExitCode)
	} else {
		b.WriteString(e.Err.Error())
	}
	if msg := summary(e.Stderr); msg != "" {
		b.WriteString(": " + msg)
	}
	return b.String()
}

func (e *GitError) Unwrap() error { return e.Err }

// subcommand is the first argument that is neither a global option nor the
// value of -c.
func (e *GitError) subcommand() string {
	for i := 0; i < len(e.Args); i++ {
		switch a := e.Args[i]; {
		case a == "-c":
			i++
		case !strings.HasPrefix(a, "-"):
			return a
		}
	}
	return ""
}

// summary is the line of stderr that says what went wrong: git's last
// "fatal:" or "error:" line, else its last line.
func summary(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	pick := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "fatal:") || strings.HasPrefix(lines[i], "error:") {
			pick = lines[i]
			break
		}
	}
	pick = strings.TrimSpace(pick)
	if len(pick) > 300 {
		pick = pick[:300] + "..."
	}
	return pick
}

// exitCode is the exit status of a failed git process, or -1.
func exitCode(err error) int {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.ExitCode
	}
	return -1
}

// stderrOf is the captured stderr of a failed git process, or "".
func stderrOf(err error) string {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.Stderr
	}
	return ""
}

// isNotRepository is git's own verdict that a folder is no repository: exit
// 128 with its "not a git repository" message. Anything else, a broken
// binary included, is an error of its own.
func isNotRepository(err error) bool {
	return exitCode(err) == 128 && strings.Contains(stderrOf(err), "not a git repository")
}

// runOpts says where and how a command runs.
type runOpts struct {
	repo     *Repo         // run in this repository (--git-dir)
	workTree string        // with repo: --work-tree, also the working directory
	dir      string        // without repo: the working directory; discovery stops there
	env      []string      // added to the fixed environment
	stdin    io.Reader     // default: empty
	stdout   io.Writer     // streams stdout here instead of returning it (no MaxOutput limit)
	timeout  time.Duration // instead of Config.Timeout, for a stream as long as its reader
	// config are "key=value" settings given with -c, after the fixed ones.
	config []string
	// extraFiles are inherited by git as fd 3 onwards.
	extraFiles []*os.File
	// owner, without repo: the account to run as (see Repo.owner); a
	// repo's own owner wins.
	owner *account
	// protocols is GIT_ALLOW_PROTOCOL. Empty allows no transport at all, so
	// a repository's config (a promisor remote, say) cannot make a read
	// reach out to the network or run a helper.
	protocols string
}

const stderrLimit = 64 << 10

// waitDelay bounds how long Wait waits for pipes after the process
// group was killed; a child that escaped the group cannot hold us longer.
const waitDelay = 2 * time.Second

// cmd builds the exec.Cmd for c. It runs in its own process group so that a
// timeout kills git and everything git started (helpers, ssh, a wrapper's
// children), not git alone.
func (s *Service) cmd(ctx context.Context, c *command, o runOpts) (*exec.Cmd, []string) {
	txwatch.Slow(ctx, "git "+c.args[0])
	args := []string{
		// A repository's config may name programs; none of these may run
		// on the server for a read.
		"-c", "core.fsmonitor=false",
		"-c", "core.hooksPath=/dev/null",
	}
	for _, kv := range o.config {
		args = append(args, "-c", kv)
	}
	dir := o.dir
	if o.repo != nil {
		args = append(args, "--git-dir="+o.repo.gitDir())
		dir = o.repo.gitDir()
		if o.workTree != "" {
			args = append(args, "--work-tree="+o.workTree)
			dir = o.workTree
		}
	}
	shown := append(append([]string(nil), args...), c.shown...)
	args = append(args, c.args...)

	cmd := exec.CommandContext(ctx, s.git, args...)
	cmd.Dir = dir
	owner := o.owner
	if o.repo != nil {
		owner = o.repo.owner
	}
	cmd.Env = s.environ(o, owner)
	cmd.ExtraFiles = o.extraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if owner != nil {
		// No supplementary groups: git gets the owner's uid and primary
		// gid and nothing of root's.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: owner.uid, Gid: owner.gid, Groups: []uint32{}}
	}
	cmd.Cancel = func() error {
		err := unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		if errors.Is(err, unix.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	cmd.WaitDelay = waitDelay
	return cmd, shown
}

// environ is the whole environment of a git process: nothing of the
// server's own environment but PATH reaches git. A process running as a
// folder's owner cannot enter the service's root-only HOME, and needs
// none: it reads the repository and writes no commits of ours, so it gets
// no HOME and no global config at all.
func (s *Service) environ(o runOpts, owner *account) []string {
	home, global := s.home, filepath.Join(s.home, ".gitconfig")
	if owner != nil {
		home, global = "/nonexistent", os.DevNull
	}
	env := []string{
		"PATH=" + s.path,
		"LC_ALL=C",
		"HOME=" + home,
		"GIT_CONFIG_GLOBAL=" + global,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_SSH_COMMAND=" + s.sshCommand(),
		"GIT_ALLOW_PROTOCOL=" + o.protocols,
	}
	// Without a repository git searches upwards; a folder that is no
	// repository must not borrow one from a parent (a data directory
	// inside a checkout, say). Paths with ':' cannot be listed there.
	if o.repo == nil && o.dir != "" {
		if parent := filepath.Dir(o.dir); !strings.Contains(parent, ":") {
			env = append(env, "GIT_CEILING_DIRECTORIES="+parent)
		}
	}
	return append(env, o.env...)
}

// sshCommand is how git runs ssh: with none of root's keys, agent, config
// or known hosts, and never asking anything. Host keys are learnt on first
// use into the service's own HOME.
func (s *Service) sshCommand() string {
	known := filepath.Join(s.home, "known_hosts")
	return "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityFile=none -o IdentityAgent=none" +
		" -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=" + shellQuote(known)
}

// shellQuote quotes s for sh, which runs GIT_SSH_COMMAND.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// run runs c to completion and returns its stdout. On failure the error is
// a *GitError and stdout holds what git wrote before failing.
func (s *Service) run(ctx context.Context, c *command, o runOpts) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	timeout := s.timeout
	if o.timeout > 0 {
		timeout = o.timeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd, shown := s.cmd(rctx, c, o)
	stdout := &limitBuffer{max: s.maxOutput, overflow: cancel}
	stderr := &tailBuffer{max: stderrLimit}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, o.stdin
	if o.stdout != nil {
		cmd.Stdout = o.stdout
	}

	start := time.Now()
	err := cmd.Run()
	s.log.Debug("git", "args", shown, "took", time.Since(start), "err", err)
	if err == nil && !stdout.over {
		return stdout.buf.Bytes(), nil
	}
	// Output over the limit fails even if git finished before the kill:
	// what is in the buffer is not all it said.
	ge := &GitError{Args: shown, ExitCode: -1, Stderr: c.scrub(stderr.String()), Err: err}
	var ee *exec.ExitError
	switch {
	case stdout.over:
		ge.Err = fmt.Errorf("output over %d bytes", s.maxOutput)
	case ctx.Err() != nil:
		ge.Err = ctx.Err()
	case rctx.Err() != nil:
		ge.Err = fmt.Errorf("timed out after %s: %w", timeout, context.DeadlineExceeded)
	case errors.As(err, &ee):
		ge.ExitCode = ee.ExitCode() // -1 when killed by a signal
	}
	return stdout.buf.Bytes(), ge
}

// limitBuffer keeps up to max bytes; past that it drops output and calls
// overflow, which kills the process rather than let it block on a full pipe.
type limitBuffer struct {
	buf      bytes.Buffer
	max      int64
	over     bool
	overflow func()
}

func (b *limitBuffer) Write(p []byte) (int, error) {
	if b.over {
		return len(p), nil
	}
	if int64(b.buf.Len()+len(p)) > b.max {
		b.over = true
		b.overflow()
		return len(p), nil
	}
	return b.buf.Write(p)
}

// tailBuffer keeps the last max bytes written: git says what went wrong at
// the end. It may be read while a process still writes to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
	cut bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cut {
		return "[...]" + string(b.buf)
	}
	return string(b.buf)
}
