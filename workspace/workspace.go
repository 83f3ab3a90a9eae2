// Package workspace decides where a project's code lives (ADR 0072): in a
// folder the server manages under PROJECT_WORKSPACES_ROOT (Container, the
// default) or in a folder of the user's own given as an absolute path (Local).
// It is the only place that turns a project into a directory and the only
// place that checks a Local path; callers pass plain values, never rows.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"atelier/fault"
)

// Mode says which kind of folder holds a project's code.
type Mode string

const (
	// Container keeps the code in a managed folder under Root.
	Container Mode = "container"
	// Local keeps the code in a folder of the user's own, at Location.Path.
	Local Mode = "local"
)

// Location is what a project row says about where its code lives.
type Location struct {
	DirName string // the managed folder's name; only used in Container mode
	Mode    Mode
	Path    string // absolute folder for Local; "" for Container
	// Identity is the Local folder as admitted at creation; nil for a row
	// written before it was recorded (see OpenLocal).
	Identity *Identity
}

var (
	// ErrUnsafeRoot reports a stored location that fails the lexical guard
	// when it is read: the database was written around the creation guard.
	ErrUnsafeRoot = fault.New(fault.Internal, "unsafe_root", "workspace: unsafe project root", "This project's folder fails the safety checks; an administrator must fix it.")
	// ErrBadDirName reports a managed folder name outside ^[A-Za-z0-9_-]{1,64}$.
	ErrBadDirName = errors.New("workspace: invalid workspace folder name")
	// ErrNotReady closes the Code tab of a Container project whose managed
	// folder does not exist yet.
	ErrNotReady = fault.New(fault.Conflict, "workspace_not_ready", "workspace: container workspace not ready", "Container workspace not ready.")
)

// Workspaces resolves project locations against one managed root and guards
// Local paths against the system's and the server's own folders.
type Workspaces struct {
	root  string   // cleaned PROJECT_WORKSPACES_ROOT, as configured
	guard []string // server folders and the root, cleaned and resolved; never "/"
	log   *slog.Logger

	localRoots  []string // ATELIER_LOCAL_ROOTS
	sessionUIDs UIDRange // session users' uids, never an owner on a Local folder's way
	inContainer bool     // see LocalPolicy.InContainer
}

// New returns Workspaces for the managed root (PROJECT_WORKSPACES_ROOT, which
// must be absolute) and the server's own folders (data directory, working
// directory, the binary's folder), which no Local path may overlap. Each is
// kept both as written and with symlinks resolved, because a person may type
// either form. A server folder equal to "/" is ignored: a service running in
// / would otherwise refuse every path, and / is refused as a system folder.
// policy is the operator's word on Local folders (see LocalPolicy).
func New(root string, serverPaths []string, policy LocalPolicy, log *slog.Logger) (*Workspaces, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("workspace: PROJECT_WORKSPACES_ROOT must be an absolute path, got %q", root)
	}
	root = filepath.Clean(root)
	if root == "/" {
		return nil, errors.New("workspace: PROJECT_WORKSPACES_ROOT must not be /")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Workspaces{root: root, log: log}
	w.addGuard(root)
	for _, p := range serverPaths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("workspace: server path %q: %w", p, err)
		}
		w.addGuard(abs)
	}
	for _, r := range policy.Roots {
		if !filepath.IsAbs(r) || filepath.Clean(r) != r {
			return nil, fmt.Errorf("workspace: ATELIER_LOCAL_ROOTS: %q is not a clean absolute folder", r)
		}
	}
	w.localRoots = slices.Clone(policy.Roots)
	w.sessionUIDs = policy.SessionUIDs
	w.inContainer = policy.InContainer
	return w, nil
}

// addGuard records a clean absolute folder and its resolved form.
func (w *Workspaces) addGuard(p string) {
	for _, q := range []string{p, resolveExisting(p)} {
		if q == "/" || slices.Contains(w.guard, q) {
			continue
		}
		w.guard = append(w.guard, q)
	}
}

// resolveExisting resolves symlinks in the longest part of p that exists, so
// a data directory that is not created yet still resolves through its parent.
func resolveExisting(p string) string {
	rest := ""
	for cur := p; ; {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if !errors.Is(err, fs.ErrNotExist) || parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// Root returns the managed root, cleaned.
func (w *Workspaces) Root() string { return w.root }

// ScopeRoot returns the folder that holds the project's code. It is the single
// derivation every consumer (the Code page, the sandbox, terminals) must
// share. A Local path is put through the lexical
// guard again on every call, because the only way around the creation guard
// is writing the database directly; the disk is not checked here, as this
// runs on every request.
func (w *Workspaces) ScopeRoot(loc Location) (string, error) {
	switch loc.Mode {
	case Container:
		if loc.Path != "" {
			return "", w.unsafe(loc, "container project has a path")
		}
		if !ValidDirName(loc.DirName) {
			w.log.Error("workspace: stored folder name is invalid",
				"dir_name", loc.DirName, "mode", string(loc.Mode))
			return "", fmt.Errorf("workspace: folder name %q: %w", loc.DirName, ErrBadDirName)
		}
		return filepath.Join(w.root, loc.DirName), nil
	case Local:
		if loc.Path == "" {
			return "", w.unsafe(loc, "local project has no path")
		}
		if pe := w.lexical(loc.Path); pe != nil {
			w.log.Error("workspace: stored local root fails the lexical guard",
				"dir_name", loc.DirName, "path", loc.Path, "reason", pe.Reason)
			return "", fmt.Errorf("workspace: local root of project %q: %w: %w", loc.DirName, ErrUnsafeRoot, pe)
		}
		return loc.Path, nil
	default:
		return "", w.unsafe(loc, "unknown workspace mode")
	}
}

// unsafe logs and reports a row whose mode and path disagree; the database
// CHECK forbids it, so seeing one means something wrote around it.
func (w *Workspaces) unsafe(loc Location, why string) error {
	w.log.Error("workspace: stored location is inconsistent",
		"dir_name", loc.DirName, "mode", string(loc.Mode), "path", loc.Path, "reason", why)
	return fmt.Errorf("workspace: project %q: %s: %w", loc.DirName, why, ErrUnsafeRoot)
}

// CreateManaged creates the managed folder dirName under Root with mode 0700,
// creating Root (also 0700) first when it is missing, and returns its path.
// Only root goes there: a session's commands see their own checkout through
// the sandbox's bind mount, never by walking down to it. A folder that
// already exists is an error wrapping fs.ErrExist: a leftover from another
// project is never adopted.
func (w *Workspaces) CreateManaged(dirName string) (string, error) {
	if !ValidDirName(dirName) {
		return "", fmt.Errorf("workspace: folder name %q: %w", dirName, ErrBadDirName)
	}
	if err := os.MkdirAll(w.root, 0o700); err != nil {
		return "", fmt.Errorf("workspace: create root: %w", err)
	}
	dir := filepath.Join(w.root, dirName)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("workspace: create managed folder %q: %w", dirName, err)
	}
	return dir, nil
}

// RemoveManaged removes the managed folder dirName and everything in it. A
// missing folder is not an error. A symlink in its place is removed, not
// followed.
func (w *Workspaces) RemoveManaged(dirName string) error {
	if !ValidDirName(dirName) {
		return fmt.Errorf("workspace: folder name %q: %w", dirName, ErrBadDirName)
	}
	if err := os.RemoveAll(filepath.Join(w.root, dirName)); err != nil {
		return fmt.Errorf("workspace: remove managed folder %q: %w", dirName, err)
	}
	return nil
}

// CodeReady is the one gate of the Code tab. A Container project needs its
// managed folder to exist as a directory (ErrNotReady otherwise). A Local
// project is exempt (ADR 0072, point 7): no container is brought up for it,
// so it would never become ready. Its path still goes through the lexical
// guard, which needs no I/O, so a corrupted row does not open the tab.
func (w *Workspaces) CodeReady(loc Location) error {
	dir, err := w.ScopeRoot(loc)
	if err != nil {
		return err
	}
	if loc.Mode == Local {
		return nil
	}
	// Lstat: the server made this folder itself, so a symlink in its
	// place is not the managed folder.
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return fmt.Errorf("workspace: project %q: %w", loc.DirName, ErrNotReady)
	}
	if err != nil {
		return fmt.Errorf("workspace: project %q: %w", loc.DirName, err)
	}
	return nil
}
