package server

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// localHostHere, as a test's Config.LocalHost, names the instance being
// made: newHarnessOn puts its own address there.
const localHostHere = "here"

// Among several instances, Local projects live on the one
// ATELIER_LOCAL_HOST names: one made through another instance is made
// there, its folder is read there, and its session's commands run there.
// With no instance named, an instance refuses Local projects with
// local_unavailable, and serves Container projects as ever.
func TestLocalProjectsLiveOnTheNamedInstance(t *testing.T) {
	needRoot(t)
	secret := func(c *Config) { c.ClusterSecret = strings.Repeat("k", 32) }
	a := newHarness(t, secret, func(c *Config) { c.LocalHost = localHostHere })
	if err := a.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	shared := func(c *Config) { c.DataDir, c.WorkspacesRoot = a.cfg.DataDir, a.cfg.WorkspacesRoot }
	b := newHarnessOn(t, a.store, nil, secret, shared, func(c *Config) { c.LocalHost = a.cfg.InternalURL })
	if err := b.app.TakeOver(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.user("root", true)
	viaB := b.signIn("root")
	folder := filepath.Join(t.TempDir(), "app")
	localGitFolder(t, folder)
	if v := viaB.validatePath(folder); !v.OK {
		t.Fatalf("the folder checked through b: %+v", v)
	}
	// b itself makes no Local project: this one was made by a.
	id := viaB.mustCreateLocal("app", folder)
	expectReadable(t, viaB, id)
	s, base := viaB.session(id)
	if out := viaB.mustRun(base, "cat app.py"); out.Stdout != "print('hi')\n" {
		t.Fatalf("a command through b read %q", out.Stdout)
	}
	if !slices.Contains(a.app.Runtime.HeldSessions(), s.ID) || len(b.app.Runtime.HeldSessions()) != 0 {
		t.Fatalf("the Local project's session runs on a %v, b %v", a.app.Runtime.HeldSessions(), b.app.Runtime.HeldSessions())
	}

	c := newHarnessOn(t, a.store, nil, secret, shared)
	viaC := c.signIn("root")
	expectProblem(t, viaC.get("/projects/"+itoa(id)+"/code/file?path=app.py", jsonAccept), http.StatusServiceUnavailable, "local_unavailable")
	expectProblem(t, viaC.createLocal("another", folder), http.StatusServiceUnavailable, "local_unavailable")
	viaC.createProject("plain")
}
