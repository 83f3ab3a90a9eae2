package workspace

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newLogged(t *testing.T, root string) (*Workspaces, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	w, err := New(root, []string{"/srv/app"}, LocalPolicy{}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return w, &buf
}

func TestScopeRoot(t *testing.T) {
	tests := []struct {
		name    string
		loc     Location
		want    string
		wantErr error
		wantLog []string // substrings of the log output; nil means nothing logged
	}{
		{name: "container joins the root", loc: Location{DirName: "my-app_2", Mode: Container},
			want: "/srv/atelier/workspaces/my-app_2"},
		{name: "container name with a slash", loc: Location{DirName: "a/b", Mode: Container},
			wantErr: ErrBadDirName, wantLog: []string{"dir_name=a/b"}},
		{name: "container name dot dot", loc: Location{DirName: "..", Mode: Container},
			wantErr: ErrBadDirName, wantLog: []string{"dir_name=.."}},
		{name: "container name empty", loc: Location{Mode: Container},
			wantErr: ErrBadDirName, wantLog: []string{"level=ERROR"}},
		{name: "local clean path as is", loc: Location{DirName: "x", Mode: Local, Path: "/srv/code/app"},
			want: "/srv/code/app"},
		{name: "local row written with /etc", loc: Location{DirName: "x", Mode: Local, Path: "/etc"},
			wantErr: ErrUnsafeRoot, wantLog: []string{"level=ERROR", "path=/etc", "reason=path_system"}},
		{name: "local row inside the managed root", loc: Location{DirName: "x", Mode: Local, Path: "/srv/atelier/workspaces/y"},
			wantErr: ErrUnsafeRoot, wantLog: []string{"reason=path_overlaps_server"}},
		{name: "local row not clean", loc: Location{DirName: "x", Mode: Local, Path: "/srv/code/../../etc"},
			wantErr: ErrUnsafeRoot, wantLog: []string{"reason=path_not_clean"}},
		{name: "local row relative", loc: Location{DirName: "x", Mode: Local, Path: "code"},
			wantErr: ErrUnsafeRoot, wantLog: []string{"reason=path_not_absolute"}},
		{name: "container with a path", loc: Location{DirName: "x", Mode: Container, Path: "/srv/code/app"},
			wantErr: ErrUnsafeRoot, wantLog: []string{"level=ERROR", "path=/srv/code/app"}},
		{name: "local without a path", loc: Location{DirName: "x", Mode: Local},
			wantErr: ErrUnsafeRoot, wantLog: []string{"level=ERROR", "mode=local"}},
		{name: "unknown mode", loc: Location{DirName: "x", Mode: "docker"},
			wantErr: ErrUnsafeRoot, wantLog: []string{"mode=docker"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, buf := newLogged(t, "/srv/atelier/workspaces")
			got, err := w.ScopeRoot(tt.loc)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("ScopeRoot(%+v) = %q, %v; want %q", tt.loc, got, err, tt.want)
				}
			} else {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ScopeRoot(%+v) error = %v, want %v", tt.loc, err, tt.wantErr)
				}
				if got != "" {
					t.Errorf("ScopeRoot(%+v) returned root %q alongside an error", tt.loc, got)
				}
			}
			logged := buf.String()
			if tt.wantLog == nil && logged != "" {
				t.Errorf("unexpected log output: %s", logged)
			}
			for _, s := range tt.wantLog {
				if !strings.Contains(logged, s) {
					t.Errorf("log output %q lacks %q", logged, s)
				}
			}
		})
	}
}

// The error for an unsafe stored root carries the guard's refusal, so a
// caller can report the reason.
func TestScopeRootUnsafeCarriesPathError(t *testing.T) {
	w, _ := newLogged(t, "/srv/atelier/workspaces")
	_, err := w.ScopeRoot(Location{DirName: "x", Mode: Local, Path: "/proc/1/root"})
	var pe *PathError
	if !errors.Is(err, ErrUnsafeRoot) || !errors.As(err, &pe) || pe.Reason != ReasonSystem {
		t.Fatalf("error = %v, want ErrUnsafeRoot wrapping a path_system *PathError", err)
	}
}

func TestCreateManaged(t *testing.T) {
	root := filepath.Join(tempDir(t), "not", "yet", "root")
	w, err := New(root, nil, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := w.CreateManaged("app-1")
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(root, "app-1") {
		t.Errorf("CreateManaged returned %q, want it under %q", dir, root)
	}
	for _, p := range []string{root, dir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want a 0700 directory", p, fi.Mode())
		}
	}
	if got, err := w.ScopeRoot(Location{DirName: "app-1", Mode: Container}); err != nil || got != dir {
		t.Errorf("ScopeRoot disagrees with CreateManaged: %q, %v; want %q", got, err, dir)
	}

	// A leftover is never adopted, whether a folder or anything else.
	if _, err := w.CreateManaged("app-1"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second CreateManaged = %v, want fs.ErrExist", err)
	}
	writeFile(t, filepath.Join(root, "leftover"))
	if _, err := w.CreateManaged("leftover"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateManaged over a file = %v, want fs.ErrExist", err)
	}
	for _, name := range []string{"", "..", "a/b", "../escape", strings.Repeat("a", 65)} {
		if _, err := w.CreateManaged(name); !errors.Is(err, ErrBadDirName) {
			t.Errorf("CreateManaged(%q) = %v, want ErrBadDirName", name, err)
		}
	}
}

func TestRemoveManaged(t *testing.T) {
	base := tempDir(t)
	w, err := New(filepath.Join(base, "ws"), nil, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := w.CreateManaged("app")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "main.go"))
	if err := w.RemoveManaged("app"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("managed folder still there: %v", err)
	}
	if err := w.RemoveManaged("app"); err != nil {
		t.Errorf("removing a missing folder = %v, want nil", err)
	}

	// A bad name is refused and nothing beside the root is touched.
	keep := filepath.Join(base, "keep")
	mkdir(t, keep)
	for _, name := range []string{"..", "../keep", "", "a/b", "."} {
		if err := w.RemoveManaged(name); !errors.Is(err, ErrBadDirName) {
			t.Errorf("RemoveManaged(%q) = %v, want ErrBadDirName", name, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("folder beside the root was touched: %v", err)
	}

	// A symlink planted in the root is removed, its target left alone.
	target := filepath.Join(base, "target")
	mkdir(t, target)
	writeFile(t, filepath.Join(target, "precious"))
	symlink(t, target, filepath.Join(base, "ws", "planted"))
	if err := w.RemoveManaged("planted"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "precious")); err != nil {
		t.Errorf("RemoveManaged followed a symlink: %v", err)
	}
}

func TestCodeReady(t *testing.T) {
	base := tempDir(t)
	w, err := New(filepath.Join(base, "ws"), nil, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateManaged("ready"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(base, "ws", "file"))
	mkdir(t, filepath.Join(base, "elsewhere"))
	symlink(t, filepath.Join(base, "elsewhere"), filepath.Join(base, "ws", "linked"))

	tests := []struct {
		name string
		loc  Location
		want error // nil means ready
	}{
		{"container present", Location{DirName: "ready", Mode: Container}, nil},
		{"container missing", Location{DirName: "missing", Mode: Container}, ErrNotReady},
		{"container a file", Location{DirName: "file", Mode: Container}, ErrNotReady},
		{"container a symlink", Location{DirName: "linked", Mode: Container}, ErrNotReady},
		{"container bad name", Location{DirName: "../ws", Mode: Container}, ErrBadDirName},
		{"local exempt", Location{DirName: "x", Mode: Local, Path: filepath.Join(base, "code")}, nil},
		{"local exempt though missing", Location{DirName: "x", Mode: Local, Path: "/srv/nowhere/at/all"}, nil},
		{"local unsafe row", Location{DirName: "x", Mode: Local, Path: "/etc"}, ErrUnsafeRoot},
	}
	for _, tt := range tests {
		err := w.CodeReady(tt.loc)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: CodeReady(%+v) = %v, want %v", tt.name, tt.loc, err, tt.want)
		}
	}
}
