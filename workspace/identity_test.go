package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sessions is the uid block the tests give to session users.
var sessions = UIDRange{Base: 4_100_000_000, Count: 1000}

// policyFixture is a Workspaces with a policy over a temporary tree, whose
// folders the tests create, chown and chmod as root.
func policyFixture(t *testing.T, roots ...string) (*Workspaces, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("precondition: giving folders to other accounts needs root")
	}
	base := tempDir(t)
	for i, r := range roots {
		roots[i] = filepath.Join(base, r)
	}
	w, err := New(filepath.Join(base, "workspaces"), []string{filepath.Join(base, "data")},
		LocalPolicy{Roots: roots, SessionUIDs: sessions}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w, base
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// A folder a session user could replace is refused at creation, wherever on
// its way the weak folder is.
func TestAdmitLocalOwnership(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, base string)
		want    string // reason; "" is accepted
	}{
		{"root's folders", func(*testing.T, string) {}, ""},
		{"another host account's folder", func(t *testing.T, base string) { chown(t, base+"/up/code", 1234) }, ""},
		{"folder of a session user", func(t *testing.T, base string) {
			chown(t, base+"/up/code", int(sessions.Base+5))
		}, ReasonUnsafeOwner},
		{"below a session user's folder", func(t *testing.T, base string) {
			chown(t, base+"/up", int(sessions.Base))
		}, ReasonUnsafeOwner},
		{"last uid of the block", func(t *testing.T, base string) {
			chown(t, base+"/up", int(sessions.Base+sessions.Count-1))
		}, ReasonUnsafeOwner},
		{"first uid past the block", func(t *testing.T, base string) {
			chown(t, base+"/up", int(sessions.Base+sessions.Count))
		}, ""},
		{"below a world-writable folder", func(t *testing.T, base string) { chmod(t, base+"/up", 0o777) }, ReasonUnsafeOwner},
		{"below a group-writable folder", func(t *testing.T, base string) { chmod(t, base+"/up", 0o775) }, ReasonUnsafeOwner},
		{"world-writable itself", func(t *testing.T, base string) { chmod(t, base+"/up/code", 0o757) }, ReasonUnsafeOwner},
		{"below a sticky world-writable folder", func(t *testing.T, base string) {
			chmod(t, base+"/up", 0o777|os.ModeSticky)
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, base := policyFixture(t)
			mkdir(t, base+"/up/code")
			tt.prepare(t, base)
			id, err := w.AdmitLocal(base+"/up/code", true)
			if tt.want == "" {
				if err != nil || id.Path != base+"/up/code" || id.Ino == 0 {
					t.Fatalf("AdmitLocal = %+v, %v; want accepted with its identity", id, err)
				}
				return
			}
			var pe *PathError
			if !errors.As(err, &pe) || pe.Reason != tt.want || pe.Message == "" || pe.Hint == "" {
				t.Fatalf("AdmitLocal = %v, want a %s refusal with a message and a hint", err, tt.want)
			}
		})
	}
}

// Someone who is not a site admin may use only the folders the operator
// lists, and learns nothing about the disk elsewhere.
func TestAdmitLocalRoots(t *testing.T) {
	w, base := policyFixture(t, "shared", "linked")
	mkdir(t, base+"/shared/app")
	mkdir(t, base+"/sharedx/app")
	mkdir(t, base+"/elsewhere/app")
	mkdir(t, base+"/real-linked/app")
	symlink(t, base+"/real-linked", base+"/linked")
	symlink(t, base+"/elsewhere/app", base+"/shared/out")

	for _, p := range []string{base + "/shared/app", base + "/shared", base + "/linked/app", base + "/real-linked/app"} {
		if _, err := w.AdmitLocal(p, false); err != nil {
			t.Errorf("AdmitLocal(%q) for a member = %v, want accepted", p, err)
		}
	}
	for _, p := range []string{
		base + "/elsewhere/app",
		base + "/sharedx/app",       // a sibling whose name starts alike
		base + "/elsewhere/missing", // refused before the disk says it is missing
		base + "/shared/out",        // a link inside that leads out
	} {
		_, err := w.AdmitLocal(p, false)
		var pe *PathError
		if !errors.As(err, &pe) || pe.Reason != ReasonLocalNotAllowed || !errors.Is(err, ErrLocalNotAllowed) {
			t.Fatalf("AdmitLocal(%q) for a member = %v, want %s", p, err, ReasonLocalNotAllowed)
		}
		if !strings.Contains(pe.Hint, "ATELIER_LOCAL_ROOTS") || !strings.Contains(pe.Message, base+"/shared") {
			t.Errorf("refusal of %q must name the allowed folders and the setting: %+v", p, pe)
		}
	}
	// Site admins are held only by the guard.
	if _, err := w.AdmitLocal(base+"/elsewhere/app", true); err != nil {
		t.Errorf("AdmitLocal for a site admin = %v, want accepted", err)
	}
	// The lexical guard still speaks first, to everyone.
	var pe *PathError
	if _, err := w.AdmitLocal("/etc", false); !errors.As(err, &pe) || pe.Reason != ReasonSystem {
		t.Errorf("AdmitLocal(/etc) for a member = %v, want %s", err, ReasonSystem)
	}

	if o := w.LocalOffer(false); o.Anywhere || len(o.Roots) != 2 || !o.Available() {
		t.Errorf("offer to a member = %+v", o)
	}
	if o := w.LocalOffer(true); !o.Anywhere {
		t.Errorf("offer to a site admin = %+v", o)
	}
}

// With no folders listed, Local projects are for site admins alone.
func TestAdmitLocalWithoutRoots(t *testing.T) {
	w, base := policyFixture(t)
	mkdir(t, base+"/app")
	_, err := w.AdmitLocal(base+"/app", false)
	var pe *PathError
	if !errors.As(err, &pe) || pe.Reason != ReasonLocalNotAllowed || !strings.Contains(pe.Hint, "ATELIER_LOCAL_ROOTS") {
		t.Fatalf("AdmitLocal for a member with no roots = %v", err)
	}
	if w.LocalOffer(false).Available() {
		t.Error("Local offered to a member with no roots listed")
	}
}

func TestNewRefusesBadLocalRoots(t *testing.T) {
	for _, r := range []string{"", "srv/code", "/srv/code/", "/srv/../etc"} {
		if _, err := New("/srv/atelier/workspaces", nil, LocalPolicy{Roots: []string{r}}, nil); err == nil {
			t.Errorf("root %q accepted", r)
		}
	}
}

// localProject admits base/top/mid/code as a site admin would create a
// project on it, writes a file into it, and returns the location the row
// would hold.
func localProject(t *testing.T) (*Workspaces, string, Location) {
	t.Helper()
	w, base := policyFixture(t)
	dir := base + "/top/mid/code"
	mkdir(t, dir)
	writeFile(t, dir+"/hello.txt")
	id, err := w.AdmitLocal(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	return w, base, Location{DirName: "p", Mode: Local, Path: dir, Identity: &id}
}

func expectMoved(t *testing.T, w *Workspaces, loc Location) {
	t.Helper()
	l, err := w.OpenLocal(loc)
	if err == nil {
		l.Close()
		t.Fatal("OpenLocal opened a folder that is not the one admitted")
	}
	if !errors.Is(err, ErrRootMoved) {
		t.Fatalf("OpenLocal = %v, want ErrRootMoved", err)
	}
}

func TestOpenLocalReadsTheAdmittedFolder(t *testing.T) {
	w, _, loc := localProject(t)
	l, err := w.OpenLocal(loc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if data, _, err := l.ReadFile("hello.txt", 10); err != nil || string(data) != "x" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	if l.Path() != loc.Path {
		t.Errorf("Path = %q, want %q", l.Path(), loc.Path)
	}
}

// Every way of putting something else where the folder was is caught: a
// link in place of a folder above it, even one leading back to the very
// same folder; the folder replaced by a link to / or moved away with
// another made in its place; or a folder on the way given to a session
// user or opened to everyone.
func TestOpenLocalRefusesWhatWasNotAdmitted(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, base string)
	}{
		{"link in a middle component to the same folder", func(t *testing.T, base string) {
			rename(t, base+"/top/mid", base+"/top/mid.real")
			symlink(t, base+"/top/mid.real", base+"/top/mid")
		}},
		{"relative link in the first component", func(t *testing.T, base string) {
			rename(t, base+"/top", base+"/top.real")
			symlink(t, "top.real", base+"/top")
		}},
		{"leaf replaced by a link to /", func(t *testing.T, base string) {
			rename(t, base+"/top/mid/code", base+"/top/mid/code.old")
			symlink(t, "/", base+"/top/mid/code")
		}},
		{"leaf replaced by a link to its own moved self", func(t *testing.T, base string) {
			rename(t, base+"/top/mid/code", base+"/top/mid/code.old")
			symlink(t, "code.old", base+"/top/mid/code")
		}},
		{"leaf moved away", func(t *testing.T, base string) {
			rename(t, base+"/top/mid/code", base+"/top/mid/code.old")
		}},
		{"leaf swapped for another folder", func(t *testing.T, base string) {
			rename(t, base+"/top/mid/code", base+"/top/mid/code.old")
			mkdir(t, base+"/top/mid/code")
			writeFile(t, base+"/top/mid/code/hello.txt")
		}},
		{"middle swapped for another folder", func(t *testing.T, base string) {
			rename(t, base+"/top/mid", base+"/top/mid.old")
			mkdir(t, base+"/top/mid/code")
		}},
		{"leaf replaced by a file", func(t *testing.T, base string) {
			rename(t, base+"/top/mid/code", base+"/top/mid/code.old")
			writeFile(t, base+"/top/mid/code")
		}},
		{"a folder above given to a session user", func(t *testing.T, base string) {
			chown(t, base+"/top", int(sessions.Base+1))
		}},
		{"a folder above opened to everyone", func(t *testing.T, base string) {
			chmod(t, base+"/top/mid", 0o777)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, base, loc := localProject(t)
			tt.change(t, base)
			expectMoved(t, w, loc)
		})
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// A link that was on the typed path at creation is resolved once: reads go
// to the folder admitted, never again through the link.
func TestOpenLocalDoesNotFollowTheTypedLink(t *testing.T) {
	w, base := policyFixture(t)
	mkdir(t, base+"/real/code")
	writeFile(t, base+"/real/code/hello.txt")
	mkdir(t, base+"/other")
	if err := os.WriteFile(base+"/other/hello.txt", []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	symlink(t, base+"/real/code", base+"/link")
	id, err := w.AdmitLocal(base+"/link", true)
	if err != nil || id.Path != base+"/real/code" {
		t.Fatalf("AdmitLocal through a link = %+v, %v; want the resolved folder recorded", id, err)
	}
	loc := Location{DirName: "p", Mode: Local, Path: base + "/link", Identity: &id}
	if err := os.Remove(base + "/link"); err != nil {
		t.Fatal(err)
	}
	symlink(t, base+"/other", base+"/link")
	l, err := w.OpenLocal(loc)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if data, _, err := l.ReadFile("hello.txt", 10); err != nil || string(data) != "x" {
		t.Fatalf("read %q, %v; want the admitted folder's file", data, err)
	}
}

// A row that never had its folder confirmed, or whose record was tampered
// with, is not read.
func TestOpenLocalRefusesUnconfirmedRows(t *testing.T) {
	w, _, loc := localProject(t)
	unrecorded := loc
	unrecorded.Identity = nil
	expectMoved(t, w, unrecorded)

	tampered := loc
	tampered.Identity = &Identity{Path: "/etc", Dev: loc.Identity.Dev, Ino: loc.Identity.Ino}
	if _, err := w.OpenLocal(tampered); !errors.Is(err, ErrUnsafeRoot) {
		t.Errorf("OpenLocal with a recorded path in /etc = %v, want ErrUnsafeRoot", err)
	}
	relative := loc
	relative.Path = "relative/dir"
	if _, err := w.OpenLocal(relative); !errors.Is(err, ErrUnsafeRoot) {
		t.Errorf("OpenLocal of a relative path = %v, want ErrUnsafeRoot", err)
	}
	container := Location{DirName: "p", Mode: Container}
	if _, err := w.OpenLocal(container); !errors.Is(err, ErrUnsafeRoot) {
		t.Errorf("OpenLocal of a Container project = %v, want ErrUnsafeRoot", err)
	}
}
