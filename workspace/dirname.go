package workspace

import (
	"strconv"
	"strings"
)

const (
	maxDirName = 64
	// maxDerived is the readable part's length; it leaves room for
	// DirNameFor's "--" and the id of any project.
	maxDerived = 56
)

// ValidDirName reports whether name may name a managed folder:
// ^[A-Za-z0-9_-]{1,64}$. Such a name has no / and is never . or .., so joining
// it to the root cannot leave the root.
func ValidDirName(name string) bool {
	if len(name) == 0 || len(name) > maxDirName {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !dirNameByte(name[i]) {
			return false
		}
	}
	return true
}

func dirNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// DirNameFrom derives a managed folder name from a free-text project name.
// Letters, digits and '_' are kept; every run of anything else (hyphens
// included, so "a - b" gives "a-b") becomes one '-'. Hyphens at either end
// are trimmed and the result is cut to 56 characters (DirNameFor cuts it
// further when a long id needs the room). A name with nothing left becomes
// "project".
func DirNameFrom(projectName string) string {
	var b strings.Builder
	sep := false
	for i := 0; i < len(projectName); i++ {
		c := projectName[i]
		if dirNameByte(c) && c != '-' {
			if sep && b.Len() > 0 {
				b.WriteByte('-')
			}
			sep = false
			b.WriteByte(c)
			if b.Len() >= maxDerived {
				break
			}
			continue
		}
		sep = true
	}
	name := strings.TrimRight(b.String(), "-")
	if len(name) > maxDerived {
		name = strings.TrimRight(name[:maxDerived], "-")
	}
	if name == "" {
		return "project"
	}
	return name
}

// DirNameFor is the managed folder of a new project: the name's readable
// part (DirNameFrom, cut to fit), "--", and the project's id, as in
// "my-app--17" or, for a name with no ASCII letter or digit, "project--18".
// It cannot collide, whatever names people choose: the readable part never
// holds "--" nor ends in '-', so the id is what follows the name's last
// "--" and two projects' names differ as their ids do; and the names
// folders had before (DirNameFrom, then "-2", "-3" … on a clash) never hold
// "--", so no new name meets an old one.
func DirNameFor(projectName string, id int64) string {
	suffix := "--" + strconv.FormatInt(id, 10)
	slug := DirNameFrom(projectName)
	if room := maxDirName - len(suffix); len(slug) > room {
		slug = strings.TrimRight(slug[:room], "-")
	}
	return slug + suffix
}
