package workspace

import (
	"strconv"
	"strings"
)

const (
	maxDirName = 64
	// maxDerived leaves room for a "-N" suffix when names collide.
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
// are trimmed and the result is cut to 56 characters, so a "-N" suffix from
// DirNameCandidate still fits. A name with nothing left becomes "project".
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

// DirNameCandidate returns the n-th name to try for base: base itself for
// n <= 1, then base-2, base-3, … The result is always a valid name: base is
// cut when the suffix would make it longer than 64, and a base that is not
// valid is first put through DirNameFrom.
func DirNameCandidate(base string, n int) string {
	if !ValidDirName(base) {
		base = DirNameFrom(base)
	}
	if n <= 1 {
		return base
	}
	suffix := "-" + strconv.Itoa(n)
	if len(base)+len(suffix) > maxDirName {
		base = base[:maxDirName-len(suffix)]
	}
	return base + suffix
}
