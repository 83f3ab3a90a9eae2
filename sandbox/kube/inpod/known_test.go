package inpod

import "testing"

// A known file's line carries what the helper compares and any path a
// walk can meet (spaces, line breaks, quotes), and a line that is not
// one of AppendKnown's is refused.
func TestKnownLines(t *testing.T) {
	for _, e := range []Entry{
		{Path: "a.txt", Kind: KindFile, Ino: 1, CtimeNs: 1796306159075503363, Size: 0, Mode: 0o644},
		{Path: "d/with space/x", Kind: KindFile, Ino: 1 << 63, CtimeNs: -1, Size: 1 << 40, Mode: 0o4755},
		{Path: "line\nbreak \"quoted\" é", Kind: KindFile, Ino: 7, CtimeNs: 9, Size: 3, Mode: 0o600},
	} {
		line := string(AppendKnown(nil, e))
		got, err := ParseKnown(line)
		if err != nil || got != e {
			t.Errorf("%q: read back %+v, %v; want %+v", line, got, err, e)
		}
	}
	for _, line := range []string{"", "1 2 3 4", `x 2 3 4 "a"`, "1 2 3 4 a", `1 2 3 4 ""`, `1 2 3 99999999999 "a"`, `1 2 3 4 "a" b`} {
		if e, err := ParseKnown(line); err == nil {
			t.Errorf("%q read as %+v", line, e)
		}
	}
}
