package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTheHelperStartsAheadOfTheServer: the sandbox's helpers, a jail's
// and a pod's, are this binary started again for every command. They run
// from the init of their packages (sandbox/injail, sandbox/kube/inpod),
// which Go sets up ahead of the server's own only while they import
// nothing but the standard library and golang.org/x/sys; a helper then
// starts in a few milliseconds instead of forty. This test binary links
// all the server does: started as either helper, it must be gone before
// the costly package set-up has run.
func TestTheHelperStartsAheadOfTheServer(t *testing.T) {
	costly := []string{
		"github.com/alecthomas/chroma/v2/lexers", // the highlighter: 10 ms
		"github.com/alecthomas/chroma/v2/styles", // 6 ms
		"k8s.io/client-go/",
		"gorm.io/gorm ",
		"github.com/gin-gonic/gin ",
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
		exit int
	}{
		// No socket at fd 3: the jail's helper fails at its first step.
		{"the jail's helper", nil, "ATELIER_SANDBOX_INIT=1", 127},
		// No verb: the pod's helper says how it is used.
		{"a pod's helper", []string{"sandbox-pod"}, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != tc.exit {
				t.Fatalf("exit: %v, want code %d\n%s", err, tc.exit, stderr.String())
			}
			trace := stderr.String()
			if !strings.Contains(trace, "init os @") {
				t.Fatalf("no package set-up traced (GODEBUG=inittrace=1):\n%s", trace)
			}
			for _, pkg := range costly {
				if strings.Contains(trace, "init "+pkg) {
					t.Errorf("%s was set up before the helper ran", strings.TrimSpace(pkg))
				}
			}
			if t.Failed() {
				t.Logf("what was set up:\n%s", trace)
			}
		})
	}
}
