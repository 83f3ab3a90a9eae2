package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"atelier/fault"
)

// Reasons a Local path is refused; they are stable and machine-readable.
const (
	ReasonNotAbsolute    = "path_not_absolute"
	ReasonNotClean       = "path_not_clean"
	ReasonNotFound       = "path_not_found"
	ReasonNotDirectory   = "path_not_directory"
	ReasonNotWritable    = "path_not_writable"
	ReasonSystem         = "path_system"
	ReasonOverlapsServer = "path_overlaps_server"
)

// Reasons of the operator's rules over Local folders.
const (
	// ReasonUnsafeOwner: a session user could replace the folder.
	ReasonUnsafeOwner = "path_unsafe_owner"
	// ReasonLocalNotAllowed: outside ATELIER_LOCAL_ROOTS, for someone who
	// is not a site admin.
	ReasonLocalNotAllowed = "local_not_allowed"
)

// ErrLocalNotAllowed is wrapped by the refusal of a folder outside
// ATELIER_LOCAL_ROOTS to someone who is not a site admin: the folder may be
// fine, the person may not use it.
var ErrLocalNotAllowed = fault.New(fault.Forbidden, "local_not_allowed",
	"workspace: only site admins may use this folder for a Local project", "Only site admins may use this folder for a Local project.")

// PathError is a refused Local path. Reason is machine-readable, Message says
// to a person what is wrong and Hint how to fix it. Err, when set, is the
// sentinel the refusal stands for (ErrLocalNotAllowed).
type PathError struct {
	Path    string
	Reason  string
	Message string
	Hint    string
	Err     error
}

func (e *PathError) Error() string {
	return fmt.Sprintf("workspace: path %q refused (%s): %s", e.Path, e.Reason, e.Message)
}

func (e *PathError) Unwrap() error { return e.Err }

// Fault answers with the refusal's own reason, message and hint: 400, or
// 403 when the folder may be fine but the person may not use it.
func (e *PathError) Fault() fault.Fault {
	kind := fault.BadInput
	if errors.Is(e.Err, ErrLocalNotAllowed) {
		kind = fault.Forbidden
	}
	return fault.Fault{Kind: kind, Reason: e.Reason, Message: e.Message, Hint: e.Hint}
}

// systemTrees are top-level folders refused together with everything below
// them; any top-level folder whose name starts with "lib" is refused too.
var systemTrees = map[string]bool{
	"etc": true, "proc": true, "sys": true, "dev": true, "boot": true,
	"usr": true, "bin": true, "sbin": true, "root": true, "run": true, "snap": true,
}

// systemVarTrees are folders under /var refused with everything below them.
var systemVarTrees = map[string]bool{
	"lib": true, "log": true, "cache": true, "spool": true, "run": true,
}

// systemExact are refused themselves, while a folder below them is fine: a
// project in /srv/code is ordinary, a project that is all of /srv is not.
var systemExact = map[string]bool{
	"/": true, "/home": true, "/mnt": true, "/media": true, "/opt": true,
	"/srv": true, "/tmp": true, "/var": true, "/var/tmp": true,
}

// CheckLexical applies the part of the guard that needs no I/O: the path must
// be absolute, clean, outside the system folders and must not overlap the
// server's folders or the managed root. It returns a *PathError or nil.
func (w *Workspaces) CheckLexical(path string) error {
	if pe := w.lexical(path); pe != nil {
		return pe
	}
	return nil
}

func (w *Workspaces) lexical(p string) *PathError {
	if !filepath.IsAbs(p) {
		return &PathError{Path: p, Reason: ReasonNotAbsolute,
			Message: "The path must be absolute, starting with /.",
			Hint:    "Type the full path of the folder as the server sees it, for example /srv/code/app."}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return &PathError{Path: p, Reason: ReasonNotClean,
			Message: "The path contains a NUL byte.",
			Hint:    "Type the path again without control characters."}
	}
	if clean := filepath.Clean(p); clean != p {
		hint := "Write the path without . or .. parts, doubled slashes or a trailing slash."
		if w.lexical(clean) == nil {
			hint += fmt.Sprintf(" Did you mean %s?", clean)
		}
		return &PathError{Path: p, Reason: ReasonNotClean,
			Message: "The path must be written plainly: no . or .. parts, no doubled or trailing slashes.",
			Hint:    hint}
	}
	if isSystem(p) {
		return &PathError{Path: p, Reason: ReasonSystem,
			Message: "The path is a system folder or lies inside one; commands run in a project there could change the server itself.",
			Hint:    ownFolderHint}
	}
	for _, g := range w.guard {
		var msg string
		switch {
		case p == g:
			msg = "The path is one of the server's own folders."
		case within(p, g):
			msg = "The path lies inside one of the server's own folders."
		case within(g, p):
			msg = "The path contains one of the server's own folders."
		default:
			continue
		}
		return &PathError{Path: p, Reason: ReasonOverlapsServer, Message: msg, Hint: ownFolderHint}
	}
	return nil
}

const ownFolderHint = "Choose a folder of your own outside the system's and the server's folders, for example /srv/code/app."

// isSystem reports whether the clean absolute path p is a system folder or
// lies below one that is refused as a whole tree.
func isSystem(p string) bool {
	if systemExact[p] {
		return true
	}
	first, rest, _ := strings.Cut(p[1:], "/")
	if systemTrees[first] || strings.HasPrefix(first, "lib") {
		return true
	}
	if first == "var" {
		second, _, _ := strings.Cut(rest, "/")
		return systemVarTrees[second]
	}
	return false
}

// within reports whether the clean absolute path p equals dir or lies below
// it, comparing whole components: /srv/application is not within /srv/app,
// and everything is within /.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// AdmitLocal is the full guard run when a Local project is created and
// when a typed folder is checked live. It returns the folder's Identity,
// which the project records so that every later read can tell the folder
// is still the one admitted (OpenLocal).
//
// In order: the lexical checks; for someone who is not a site admin, the
// operator's list of folders (ATELIER_LOCAL_ROOTS), before the disk is
// touched, so the answers cannot be used to learn what exists elsewhere on
// the host, nor where the server's own folders are (see shownTo); then the
// disk. The folder must exist, be a directory (a symlink to one counts),
// lead through its symlinks to a place that passes the same checks, be
// reached from / through folders no session user can change (see
// checkFolder), and be writable and searchable by the server's own
// account. It returns a *PathError for anything a person can fix, or
// another error when the disk fails in a way they cannot. It writes
// nothing.
func (w *Workspaces) AdmitLocal(path string, siteAdmin bool) (Identity, error) {
	if pe := w.lexical(path); pe != nil {
		return Identity{}, w.shownTo(pe, path, "", siteAdmin)
	}
	if !siteAdmin && !w.inLocalRoots(path) {
		return Identity{}, w.notAllowed(path, "")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Identity{}, w.diskRefusal(path, err)
	}
	if !fi.IsDir() {
		return Identity{}, &PathError{Path: path, Reason: ReasonNotDirectory,
			Message: "The path is a file, not a folder.",
			Hint:    "Give the path of a folder. " + w.mountHint(path)}
	}
	// Resolve before the access check, so a link into /etc is reported as
	// a system folder whatever account the server runs as.
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Identity{}, w.diskRefusal(path, err)
	}
	if resolved != path {
		if pe := w.lexical(resolved); pe != nil {
			pe.Path = path
			pe.Message = fmt.Sprintf("The path leads through a symbolic link to %s. %s", resolved, pe.Message)
			return Identity{}, w.shownTo(pe, path, resolved, siteAdmin)
		}
		if !siteAdmin && !w.inLocalRoots(resolved) {
			return Identity{}, w.notAllowed(path, resolved)
		}
	}
	// The identity comes from the same walk that checks the owners, so
	// what is recorded is exactly what was checked.
	id, err := w.identify(resolved)
	var unsafe *unsafeFolderError
	if errors.As(err, &unsafe) {
		return Identity{}, &PathError{Path: path, Reason: ReasonUnsafeOwner,
			Message: unsafe.sentence() + " Someone who is not the folder's owner could replace it with a link elsewhere once it is checked.",
			Hint:    "Choose a folder that, with every folder above it, belongs to root or to a host account of your own and is not writable by group or others (chmod go-w), unless it has the sticky bit as /tmp does."}
	}
	if err != nil {
		return Identity{}, w.diskRefusal(path, err)
	}
	if err := unix.Access(resolved, unix.W_OK|unix.X_OK); err != nil {
		return Identity{}, w.diskRefusal(path, err)
	}
	return id, nil
}

// inLocalRoots reports whether the clean absolute path p is at or below one
// of the folders the operator lists, as written or with its symlinks
// resolved now (an operator may list /srv/code while it links elsewhere).
func (w *Workspaces) inLocalRoots(p string) bool {
	for _, r := range w.localRoots {
		if within(p, r) || within(p, resolveExisting(r)) {
			return true
		}
	}
	return false
}

// shownTo is the lexical refusal pe as the person who typed path may see
// it; resolved is where a symlink took path, or "". Only site admins are
// told that a path is, holds or lies in one of the server's own folders
// (the data dir, the workspaces root, …): anyone else could find them by
// trying paths. Outside ATELIER_LOCAL_ROOTS such a path is refused as any
// other folder there is; inside them, where the person may otherwise
// choose, it is "not allowed", with its reason kept and nothing said of
// which folder is the server's.
func (w *Workspaces) shownTo(pe *PathError, path, resolved string, siteAdmin bool) *PathError {
	if siteAdmin || pe.Reason != ReasonOverlapsServer {
		return pe
	}
	checked := path
	if resolved != "" {
		checked = resolved
	}
	if !w.inLocalRoots(checked) {
		return w.notAllowed(path, resolved)
	}
	return &PathError{Path: path, Reason: ReasonOverlapsServer,
		Message: "This folder is not allowed for a Local project.",
		Hint:    "Choose another folder at or below " + strings.Join(w.localRoots, ", ") + "."}
}

// notAllowed refuses a folder outside the operator's list to someone who is
// not a site admin; resolved is where a symlink took the typed path, or "".
func (w *Workspaces) notAllowed(path, resolved string) *PathError {
	pe := &PathError{Path: path, Reason: ReasonLocalNotAllowed, Err: ErrLocalNotAllowed}
	via := ""
	if resolved != "" {
		via = fmt.Sprintf("The path leads through a symbolic link to %s. ", resolved)
	}
	if len(w.localRoots) == 0 {
		pe.Message = via + "Only site admins may create Local projects here: the operator has listed no folders for everyone else."
		pe.Hint = "Ask the operator to list the folders people may use in ATELIER_LOCAL_ROOTS (absolute folders separated by colons), or ask a site admin to create the project."
		return pe
	}
	pe.Message = via + "Only site admins may use a folder outside " + strings.Join(w.localRoots, ", ") + "."
	pe.Hint = "Choose a folder at or below one of them, or ask the operator to add yours to ATELIER_LOCAL_ROOTS (absolute folders separated by colons)."
	return pe
}

// diskRefusal turns a failed stat, symlink walk or access check into the
// refusal a person can act on, or passes an unexpected failure through.
func (w *Workspaces) diskRefusal(path string, err error) error {
	where := "on the server"
	if w.inContainer {
		where = "inside the server's container"
	}
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR),
		errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENAMETOOLONG):
		return &PathError{Path: path, Reason: ReasonNotFound,
			Message: "No folder exists at this path " + where + ".",
			Hint:    w.mountHint(path)}
	case errors.Is(err, unix.EROFS):
		return &PathError{Path: path, Reason: ReasonNotWritable,
			Message: "The folder is mounted read-only, so the server cannot write to it.",
			Hint:    w.writableHint(path)}
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return &PathError{Path: path, Reason: ReasonNotWritable,
			Message: "The server's account may not write to this folder.",
			Hint:    w.writableHint(path)}
	}
	return fmt.Errorf("workspace: check %q: %w", path, err)
}

// mountHint tells how to make a missing folder visible: a container sees
// only what is mounted into it; a server running natively sees the host.
// Hints are plain text, shown as they are: no Markdown.
func (w *Workspaces) mountHint(path string) string {
	if !w.inContainer {
		return "Check the path for typing mistakes, or create the folder on the server first."
	}
	return "Mount it into the Atelier container at the same path: in compose.yaml, under volumes: of the atelier-a service (the instance ATELIER_LOCAL_HOST names, which serves Local projects), add the line " + composeLine(path)
}

func (w *Workspaces) writableHint(path string) string {
	if !w.inContainer {
		return fmt.Sprintf("Let the account the server runs as (uid %d) write to it, or choose a folder it may write to.", os.Geteuid())
	}
	return "Mount it writable (without :ro) into the Atelier container at the same path, and let the account the server runs as write to it: in compose.yaml, under volumes: of the atelier-a service (the instance ATELIER_LOCAL_HOST names, which serves Local projects), the line is " +
		composeLine(path)
}

// composeLine renders the volumes entry that mounts path at the same path.
// A path Compose's short syntax or the hint's own quoting cannot carry (a
// colon, control characters, bytes that are not UTF-8) gets a placeholder;
// one YAML would misread is double-quoted.
func composeLine(path string) string {
	placeholder := "- /path/on/host:/path/on/host (with the folder's absolute path on both sides)"
	if !utf8.ValidString(path) {
		return placeholder
	}
	plain := true
	for _, r := range path {
		switch {
		case r == ':' || r < 0x20 || r == 0x7f:
			return placeholder
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("/._-+@~", r):
		default:
			plain = false
		}
	}
	entry := path + ":" + path
	if !plain {
		entry = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(entry) + `"`
	}
	return "- " + entry
}
