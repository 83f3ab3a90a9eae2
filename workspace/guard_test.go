package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fixture stands a server up in a temporary tree:
//
//	base/data            the data directory
//	base/srv/app         the working directory
//	base/binlink         the binary's folder as configured, a link to base/real/bin
//	base/workspaces      PROJECT_WORKSPACES_ROOT
//
// "/" is passed as a server path too, the way a service whose working
// directory is / would, and must be ignored.
type fixture struct {
	base string
	w    *Workspaces
}

// check runs the guard as it stands for a site admin, who may use any
// folder it allows.
func (f fixture) check(p string) error {
	_, err := f.w.AdmitLocal(p, true)
	return err
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := tempDir(t)
	for _, d := range []string{"data/projects", "srv/app", "srv/application", "real/bin", "workspaces/p1"} {
		mkdir(t, filepath.Join(base, d))
	}
	symlink(t, filepath.Join(base, "real/bin"), filepath.Join(base, "binlink"))
	w, err := New(filepath.Join(base, "workspaces"),
		[]string{filepath.Join(base, "data"), filepath.Join(base, "srv/app"), filepath.Join(base, "binlink"), "/"}, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{base: base, w: w}
}

// tempDir returns a resolved temporary folder and fails when the machine's
// temporary folder is itself one the guard refuses, which would make every
// case below test the wrong thing.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if isSystem(dir) {
		t.Fatalf("precondition: temporary folder %s lies in a system folder; set TMPDIR to a folder under /tmp", dir)
	}
	return dir
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// readOnlyMount bind-mounts a fresh folder read-only and returns where.
func readOnlyMount(t *testing.T, base string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("precondition: bind-mounting a read-only folder needs root")
	}
	src, dst := filepath.Join(base, "ro-src"), filepath.Join(base, "ro")
	mkdir(t, src)
	mkdir(t, dst)
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dst, 0); err != nil {
			t.Errorf("unmount %s: %v", dst, err)
		}
	})
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	return dst
}

func TestAdmitLocal(t *testing.T) {
	tests := []struct {
		name string
		path func(t *testing.T, base string) string
		want string // reason; "" means accepted
	}{
		{"relative", fixed("src/app"), ReasonNotAbsolute},
		{"empty", fixed(""), ReasonNotAbsolute},
		{"root", fixed("/"), ReasonSystem},
		{"etc", fixed("/etc"), ReasonSystem},
		{"inside etc", fixed("/etc/x"), ReasonSystem},
		{"proc self cwd", fixed("/proc/self/cwd"), ReasonSystem},
		{"usr local", fixed("/usr/local/src"), ReasonSystem},
		{"lib64", fixed("/lib64"), ReasonSystem},
		{"var lib", fixed("/var/lib/docker"), ReasonSystem},
		{"home itself", fixed("/home"), ReasonSystem},
		{"var tmp itself", fixed("/var/tmp"), ReasonSystem},
		{"dot dot escape", fixed("/home/u/../../etc"), ReasonNotClean},
		{"dot component", func(t *testing.T, base string) string { return base + "/./ok" }, ReasonNotClean},
		{"trailing slash", func(t *testing.T, base string) string { return base + "/ok/" }, ReasonNotClean},
		{"double slash", fixed("//home"), ReasonNotClean},
		{"inner double slash", func(t *testing.T, base string) string { return base + "//ok" }, ReasonNotClean},
		{"NUL byte", func(t *testing.T, base string) string { return base + "/ok\x00x" }, ReasonNotClean},
		{"missing", func(t *testing.T, base string) string { return base + "/missing" }, ReasonNotFound},
		{"below a file", func(t *testing.T, base string) string { return writeFile(t, base+"/f") + "/sub" }, ReasonNotFound},
		{"regular file", func(t *testing.T, base string) string { return writeFile(t, base+"/f") }, ReasonNotDirectory},
		{"read-only bind mount", readOnlyMount, ReasonNotWritable},
		{"data dir", sub("data"), ReasonOverlapsServer},
		{"parent of data dir", func(t *testing.T, base string) string { return base }, ReasonOverlapsServer},
		{"inside data dir", sub("data/projects"), ReasonOverlapsServer},
		{"parent of working dir", sub("srv"), ReasonOverlapsServer},
		{"workspaces root", sub("workspaces"), ReasonOverlapsServer},
		{"inside workspaces root", sub("workspaces/p1"), ReasonOverlapsServer},
		{"binary folder by its real path", sub("real/bin"), ReasonOverlapsServer},
		{"symlink to etc", link("/etc"), ReasonSystem},
		{"symlink chain to etc", func(t *testing.T, base string) string {
			symlink(t, "/etc", base+"/l2")
			symlink(t, base+"/l2", base+"/l1")
			return base + "/l1"
		}, ReasonSystem},
		{"symlink to data dir", func(t *testing.T, base string) string {
			symlink(t, base+"/data", base+"/d")
			return base + "/d"
		}, ReasonOverlapsServer},
		{"symlink to a file", func(t *testing.T, base string) string {
			symlink(t, writeFile(t, base+"/f"), base+"/lf")
			return base + "/lf"
		}, ReasonNotDirectory},
		{"dangling symlink", link("/nonexistent-atelier-target"), ReasonNotFound},
		{"symlink loop", func(t *testing.T, base string) string {
			symlink(t, base+"/loop-b", base+"/loop-a")
			symlink(t, base+"/loop-a", base+"/loop-b")
			return base + "/loop-a"
		}, ReasonNotFound},

		{"sibling sharing a prefix with the server", sub("srv/application"), ""},
		{"ordinary writable folder", func(t *testing.T, base string) string {
			mkdir(t, base+"/code/app")
			return base + "/code/app"
		}, ""},
		{"symlink to an ordinary folder", func(t *testing.T, base string) string {
			mkdir(t, base+"/code/real")
			symlink(t, base+"/code/real", base+"/code/link")
			return base + "/code/link"
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			p := tt.path(t, f.base)
			err := f.check(p)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("AdmitLocal(%q) = %v, want accepted", p, err)
				}
				return
			}
			var pe *PathError
			if !errors.As(err, &pe) {
				t.Fatalf("AdmitLocal(%q) = %v, want a *PathError with reason %s", p, err, tt.want)
			}
			if pe.Reason != tt.want {
				t.Fatalf("AdmitLocal(%q) reason = %s (%s), want %s", p, pe.Reason, pe.Message, tt.want)
			}
			if pe.Path != p || pe.Message == "" || pe.Hint == "" {
				t.Errorf("refusal must name the typed path and carry a message and a hint: %+v", pe)
			}
		})
	}
}

func fixed(p string) func(*testing.T, string) string {
	return func(*testing.T, string) string { return p }
}

func sub(rel string) func(*testing.T, string) string {
	return func(_ *testing.T, base string) string { return filepath.Join(base, rel) }
}

func link(target string) func(*testing.T, string) string {
	return func(t *testing.T, base string) string {
		symlink(t, target, base+"/link")
		return base + "/link"
	}
}

func writeFile(t *testing.T, p string) string {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The server's folders are compared by component and the "exact only"
// system folders allow what lies below them, with no disk involved.
func TestCheckLexical(t *testing.T) {
	w, err := New("/srv/atelier/workspaces", []string{"/srv/app", "/opt/atelier/bin", "/"}, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
	}{
		{"/srv/application", ""},
		{"/srv/app2/x", ""},
		{"/srv/ap", ""},
		{"/srv/app", ReasonOverlapsServer},
		{"/srv/app/x/y", ReasonOverlapsServer},
		{"/srv", ReasonSystem},
		{"/srv/atelier", ReasonOverlapsServer},
		{"/srv/atelier/workspaces/p", ReasonOverlapsServer},
		{"/srv/atelier-other", ""},
		{"/opt", ReasonSystem},
		{"/opt/atelier", ReasonOverlapsServer},
		{"/opt/code", ""},
		{"/home/u/code", ""},
		{"/home/u", ""},
		{"/mnt/data", ""},
		{"/tmp/x", ""},
		{"/var/www/site", ""},
		{"/var", ReasonSystem},
		{"/var/tmp", ReasonSystem},
		{"/var/tmp/x", ""},
		{"/var/lib", ReasonSystem},
		{"/var/log/app", ReasonSystem},
		{"/var/run/docker.sock", ReasonSystem},
		{"/library", ReasonSystem},
		{"/libx32/x", ReasonSystem},
		{"/etcetera", ""},
		{"/rooted", ""},
		{"/root/code", ReasonSystem},
		{"/run/user/1000", ReasonSystem},
		{"/snap/x", ReasonSystem},
		{"/home/", ReasonNotClean},
		{"/home/u/.", ReasonNotClean},
		{"/home/u/..", ReasonNotClean},
		{"/..", ReasonNotClean},
		{"./home", ReasonNotAbsolute},
		{"home/u", ReasonNotAbsolute},
	}
	for _, tt := range tests {
		err := w.CheckLexical(tt.path)
		got := ""
		var pe *PathError
		if errors.As(err, &pe) {
			got = pe.Reason
		} else if err != nil {
			t.Errorf("CheckLexical(%q) = %v, not a *PathError", tt.path, err)
			continue
		}
		if got != tt.want {
			t.Errorf("CheckLexical(%q) reason = %q, want %q", tt.path, got, tt.want)
		}
	}
}

// A person whose folder is not mounted into the server's container gets
// the compose line to add, with their own path, quoted when YAML needs it,
// in plain text (a hint is shown as it is, so no Markdown).
func TestHintsCarryTheComposeLine(t *testing.T) {
	f := newFixture(t)
	f.w.inContainer = true
	tests := []struct {
		path     func(t *testing.T, base string) string
		wantLine func(base string) string
	}{
		{sub("not/mounted"), func(b string) string {
			return "add the line - " + b + "/not/mounted:" + b + "/not/mounted"
		}},
		{sub("My Code"), func(b string) string {
			return "- \"" + b + "/My Code:" + b + "/My Code\""
		}},
		{sub(`say "hi"`), func(b string) string {
			return "- \"" + b + `/say \"hi\":` + b + `/say \"hi\"` + "\""
		}},
		{sub("a:b"), func(string) string { return "- /path/on/host:/path/on/host" }},
		{func(t *testing.T, base string) string { return writeFile(t, base+"/file") }, func(b string) string {
			return "- " + b + "/file:" + b + "/file"
		}},
	}
	for _, tt := range tests {
		p := tt.path(t, f.base)
		var pe *PathError
		if !errors.As(f.check(p), &pe) {
			t.Fatalf("AdmitLocal(%q) accepted, want a refusal", p)
		}
		if want := tt.wantLine(f.base); !strings.Contains(pe.Hint, want) {
			t.Errorf("hint for %q = %q, want it to contain %s", p, pe.Hint, want)
		}
		if !strings.Contains(pe.Hint, "same path") || !strings.Contains(pe.Message+pe.Hint, "container") {
			t.Errorf("hint for %q does not say to mount into the container at the same path: %q", p, pe.Hint)
		}
		if strings.Contains(pe.Message+pe.Hint, "`") {
			t.Errorf("Markdown in the refusal of %q: %q %q", p, pe.Message, pe.Hint)
		}
	}
}

// A server running natively sees the host's folders: its refusals speak of
// the server, never of containers, volumes or compose files.
func TestNativeHintsSpeakOfTheServer(t *testing.T) {
	f := newFixture(t)
	f.w.inContainer = false
	var pe *PathError
	if !errors.As(f.check(f.base+"/not/there"), &pe) || pe.Reason != ReasonNotFound {
		t.Fatalf("refusal %v", pe)
	}
	for _, word := range []string{"container", "compose", "volumes", "mount", "`"} {
		if strings.Contains(strings.ToLower(pe.Message+pe.Hint), word) {
			t.Errorf("a native server's refusal speaks of %q: %q %q", word, pe.Message, pe.Hint)
		}
	}
	if !strings.Contains(pe.Message, "on the server") {
		t.Errorf("message %q", pe.Message)
	}
}

// A mistyped path that would be fine once cleaned gets a suggestion; one
// that cleans into /etc does not.
func TestNotCleanHint(t *testing.T) {
	w, err := New("/srv/atelier/workspaces", nil, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pe *PathError
	if !errors.As(w.CheckLexical("/srv/code//app/"), &pe) || !strings.Contains(pe.Hint, "Did you mean /srv/code/app?") {
		t.Errorf("hint for a fixable path = %+v, want a suggestion", pe)
	}
	if !errors.As(w.CheckLexical("/home/u/../../etc"), &pe) || strings.Contains(pe.Hint, "/etc") {
		t.Errorf("hint for a path cleaning into /etc = %+v, want no suggestion", pe)
	}
}

// Checking a folder writes nothing into it.
func TestAdmitLocalLeavesFolderUntouched(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.base, "mine")
	mkdir(t, dir)
	if err := f.check(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("AdmitLocal left %d entries in the folder", len(entries))
	}
}

// A server folder that does not exist yet is still guarded by its resolved
// form: the data directory configured through a link to a folder whose leaf
// is not created yet.
func TestNewResolvesMissingServerPaths(t *testing.T) {
	base := tempDir(t)
	mkdir(t, base+"/real")
	symlink(t, base+"/real", base+"/link")
	w, err := New(base+"/ws", []string{base + "/link/data"}, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pe *PathError
	if !errors.As(w.CheckLexical(base+"/real/data/x"), &pe) || pe.Reason != ReasonOverlapsServer {
		t.Errorf("path inside the resolved data dir: %v, want %s", w.CheckLexical(base+"/real/data/x"), ReasonOverlapsServer)
	}
	if err := w.CheckLexical(base + "/real/other"); err != nil {
		t.Errorf("sibling of the resolved data dir refused: %v", err)
	}
}

func TestNewRefusesBadRoot(t *testing.T) {
	for _, root := range []string{"", "relative/ws", "/", "//"} {
		if _, err := New(root, nil, LocalPolicy{}, nil); err == nil {
			t.Errorf("New(%q) accepted", root)
		}
	}
}
