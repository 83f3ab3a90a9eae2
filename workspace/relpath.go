package workspace

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"atelier/fault"
)

// ErrBadPath reports a path inside a project that CheckRelPath or
// CheckRelDir refuses; the server answers it with 400 and reason bad_path.
var ErrBadPath = fault.New(fault.BadInput, "bad_path", "workspace: bad path", "Bad path.")

// MaxRelPath is the longest path inside a project, in bytes. It matches the
// kernel's PATH_MAX, which a path joined to its root could not exceed anyway.
const MaxRelPath = 4096

// Two checks guard a path inside a project. CheckRelPath is for paths that
// name what may already be there: reads, downloads, listings, deletions and
// the old side of a rename. Names that git and file systems hold, whoever
// wrote them (a repository imported before CheckNewPath existed, a Local
// folder's owner), stay readable. CheckNewPath is for paths that enter a
// project's code through Atelier: a file or folder made, saved or renamed
// in an edit session, an "Edit this file", an archive's entry, a git
// source's tree, a capture of what a command wrote. It adds the rules for
// names no terminal, diff or file list shows faithfully.

// CheckRelPath accepts the path of a file or folder inside a project's tree
// and returns nil, or an error wrapping ErrBadPath that says why it is
// refused. An accepted path is relative, valid UTF-8, at most MaxRelPath
// bytes, has no NUL byte and is written plainly: no empty component (so no
// doubled or trailing slash), no . or .. and no component that names the
// repository's .git folder (see isDotGit). Everything else is an ordinary
// name, taken literally: a backslash is a byte like any other on Linux and
// "%2e%2e" is a file called that, because nothing here decodes anything.
//
// The checks are lexical. They keep a path from climbing out of the tree by
// its spelling; symlinks on the disk are os.Root's business (see LocalFS).
func CheckRelPath(p string) error {
	if p == "" {
		return badPath(p, "the path is empty")
	}
	return checkRel(p)
}

// CheckNewPath is CheckRelPath for a path that enters a project (see
// above): every component must also be a name a person can read as it is.
// It refuses a control character (C0 U+0000–U+001F, DEL U+007F, C1
// U+0080–U+009F: a newline splits the lines of every tool that lists
// paths, an escape sequence recolours or rewrites a terminal), a
// bidirectional override or isolate (U+202A–U+202E, U+2066–U+2069: they
// show "txt.exe" as "exe.txt"), and a component made only of white space,
// which looks like no name at all.
func CheckNewPath(p string) error {
	if err := CheckRelPath(p); err != nil {
		return err
	}
	for name := range strings.SplitSeq(p, "/") {
		if why := unreadable(name); why != "" {
			return badPath(p, why)
		}
	}
	return nil
}

// unreadable returns why name cannot be shown as it is, or "" when it can.
func unreadable(name string) string {
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return "the name has a control character"
		case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			return "the name has a bidirectional override or isolate"
		}
	}
	if strings.TrimFunc(name, unicode.IsSpace) == "" {
		return "a name is only white space"
	}
	return ""
}

// CheckRelDir is CheckRelPath for folder listings, where "" names the root
// of the project's tree and is accepted.
func CheckRelDir(p string) error {
	if p == "" {
		return nil
	}
	return checkRel(p)
}

func checkRel(p string) error {
	// Length first, so a huge input is refused before anything walks it.
	if len(p) > MaxRelPath {
		return badPath(p, fmt.Sprintf("the path is %d bytes long, more than %d", len(p), MaxRelPath))
	}
	if p[0] == '/' {
		return badPath(p, "the path is absolute")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return badPath(p, "the path contains a NUL byte")
	}
	if !utf8.ValidString(p) {
		return badPath(p, "the path is not valid UTF-8")
	}
	for name := range strings.SplitSeq(p, "/") {
		if why := checkName(name); why != "" {
			return badPath(p, why)
		}
	}
	return nil
}

// checkName returns why a single component may not appear in a path, or ""
// when it may. It assumes no slash and no NUL.
func checkName(name string) string {
	switch {
	case name == "":
		return "the path has an empty component (a doubled or trailing slash)"
	case name == "." || name == "..":
		return "the path has a " + name + " component"
	case isDotGit(name):
		return "the path goes into the .git folder"
	}
	return ""
}

// badPath wraps ErrBadPath. The path is cut in the message so a refused
// 4 KiB path does not fill the log.
func badPath(p, why string) error {
	return fault.Detailf(ErrBadPath, " %.120q: %s", p, why)
}

// isDotGit reports whether a folder called name could be the repository's
// .git folder on some filesystem a project may live on. The server runs on
// Linux, but a Local folder can sit on a mount that compares names loosely,
// so besides any case of ".git" it refuses the spellings such a mount treats
// as the same name (the set git itself refuses, see is_ntfs_dotgit and
// is_hfs_dotgit in git's path.c):
//
//   - trailing dots and spaces, which vfat and NTFS drop (".git.", ".git ");
//   - the 8.3 short name "git~1" that vfat and NTFS give ".git";
//   - the code points HFS+ ignores when it compares names, such as a
//     zero-width joiner inside ".g\u200dit".
//
// Names that merely start with .git (.gitignore, .github) are ordinary.
func isDotGit(name string) bool {
	if strings.EqualFold(name, ".git") {
		return true // the common case, without allocating
	}
	if !strings.ContainsAny(name, "gG") {
		return false // no spelling of .git lacks its g
	}
	name = strings.Map(func(r rune) rune {
		if hfsIgnorable(r) {
			return -1
		}
		return r
	}, name)
	name = strings.TrimRight(name, ". ")
	return strings.EqualFold(name, ".git") || strings.EqualFold(name, "git~1")
}

// hfsIgnorable reports the code points HFS+ skips when it compares names.
func hfsIgnorable(r rune) bool {
	return r >= 0x200c && r <= 0x200f || r >= 0x202a && r <= 0x202e ||
		r >= 0x206a && r <= 0x206f || r == 0xfeff
}
