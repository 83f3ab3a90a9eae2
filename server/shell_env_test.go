package server

import (
	"os"
	"strings"
	"testing"
)

// envProbe prints what a person checks first when a tool is missing: where
// go is, the PATH, HOME and LANG. The markers are computed by the shell,
// so a terminal's echo of the typed line never matches them.
const envProbe = `echo "BEGIN-$((40+2))"; printf 'go=%s\n' "$(command -v go)"; printf 'path=%s\nhome=%s\nlang=%s\n' "$PATH" "$HOME" "$LANG"; echo "END-$((40+2))"`

// between is what s holds between the probe's markers, with a terminal's
// line endings made plain.
func between(t *testing.T, s string) string {
	t.Helper()
	s = strings.ReplaceAll(s, "\r\n", "\n")
	_, after, ok := strings.Cut(s, "BEGIN-42\n")
	inside, _, ok2 := strings.Cut(after, "END-42")
	if !ok || !ok2 {
		t.Fatalf("no probe output in %q", s)
	}
	return inside
}

// A terminal and a one-shot command of the session see one environment:
// the same go, PATH (Go's toolchain and ATELIER_SANDBOX_PATH included),
// HOME and LANG. The terminal's shell is an interactive bash, not a login
// shell (a login shell reads the host's /etc/profile, which sets PATH
// anew), with the TERM of the page's xterm.js, and it reads the
// session's own ~/.bashrc.
func TestTerminalAndCommandShareTheEnvironment(t *testing.T) {
	needRoot(t)
	const extra = "/usr/lib/atelier-test/bin"
	inCommand := terminalAndCommandShareTheEnvironment(t, newHarness(t, func(c *Config) { c.Sandbox.Path = []string{extra} }))
	if !strings.Contains(inCommand, ":"+extra+"\n") {
		t.Fatalf("the command's PATH lacks ATELIER_SANDBOX_PATH: %q", inCommand)
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil && !strings.Contains(inCommand, "go=/usr/local/go/bin/go\n") {
		t.Fatalf("the host has Go, the command does not find it: %q", inCommand)
	}
}

// In a pod, whose environment is its image's.
func TestTerminalAndCommandShareTheEnvironmentInAPod(t *testing.T) {
	needRoot(t)
	terminalAndCommandShareTheEnvironment(t, newHarness(t, onKube(t)))
}

// terminalAndCommandShareTheEnvironment answers what the probe printed
// in a command.
func terminalAndCommandShareTheEnvironment(t *testing.T, h *harness) string {
	owner, id := editable(t, h)
	_, base := owner.session(id)

	out, res := owner.run(base, envProbe, "")
	if res.StatusCode != 200 || out.ExitCode != 0 {
		t.Fatalf("the command: %d %+v", res.StatusCode, out)
	}
	inCommand := between(t, out.Stdout)
	// The session's own start-up file, written as any file of HOME.
	if out, _ := owner.run(base, `echo 'alias greet="echo bashrc-read-\$((6*7))"' > ~/.bashrc`, ""); out.ExitCode != 0 {
		t.Fatalf("writing ~/.bashrc: %+v", out)
	}

	term, res := owner.openTerminal(base)
	if res.StatusCode != 201 {
		t.Fatalf("open: %d %s", res.StatusCode, readBody(res))
	}
	stream := base + "/terminals/" + term.ID + "/stream"
	owner.input(base, term.ID, 1, envProbe+"\r")
	shown, _ := owner.streamUntil(t, stream, "END-42")
	if inTerminal := between(t, shown); inTerminal != inCommand {
		t.Fatalf("the terminal's environment differs from the command's:\nterminal %q\ncommand  %q", inTerminal, inCommand)
	}
	owner.input(base, term.ID, 2, `case $- in *i*) echo "interactive-$((1+1))";; esac; shopt -q login_shell || echo "not-login-$((1+2))"; echo "term-is-$TERM"; greet`+"\r")
	shown, _ = owner.streamUntil(t, stream, "bashrc-read-42")
	for _, want := range []string{"interactive-2", "not-login-3", "term-is-xterm-256color"} {
		if !strings.Contains(shown, want) {
			t.Fatalf("the shell is not an interactive, non-login bash for xterm.js: %q", shown)
		}
	}
	return inCommand
}
