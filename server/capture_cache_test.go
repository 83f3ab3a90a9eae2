package server

import (
	"net/http"
	"testing"
	"time"
)

// TestCaptureSeesAWriteThatKeepsSizeAndMtime: the capture skips files whose
// inode and times it saw last time, and the sandboxed user sets mtimes at
// will. A command that rewrites a file the capture already trusts with
// content of the same size, then puts its mtime back, is still an edit.
func TestCaptureSeesAWriteThatKeepsSizeAndMtime(t *testing.T) {
	needRoot(t)
	captureSeesAWriteThatKeepsSizeAndMtime(t, newHarness(t))
}

// The same in a pod: the manifest's inode and change time tell the
// rewrite apart, whatever its size and mtime.
func TestCaptureSeesAWriteThatKeepsSizeAndMtimeInAPod(t *testing.T) {
	needRoot(t)
	captureSeesAWriteThatKeepsSizeAndMtime(t, newHarness(t, onKube(t)))
}

func captureSeesAWriteThatKeepsSizeAndMtime(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	run := func(command string) {
		t.Helper()
		out, res := owner.run(base, command, "")
		if res.StatusCode != http.StatusOK || out.ExitCode != 0 {
			t.Fatalf("%s: %d %+v", command, res.StatusCode, out)
		}
	}
	run("printf aaaa > same.txt && touch -d @978307200 same.txt")
	// Past the racy margin, the next capture trusts what it reads.
	// Not a wait for an event: ctimes are stamped by the kernel's clock,
	// which no test can move, and it is on that clock that the margin
	// must pass.
	time.Sleep(1100 * time.Millisecond)
	run("true")
	run(`before=$(stat -c %s.%Y same.txt) && printf bbbb > same.txt && touch -d @978307200 same.txt && test "$(stat -c %s.%Y same.txt)" = "$before"`)
	if got, _, status := owner.read(base, "same.txt"); status != http.StatusOK || got != "bbbb" {
		t.Fatalf("same.txt after a same-size write with its mtime put back: %d %q, want bbbb", status, got)
	}
}
