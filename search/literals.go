package search

import (
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// literals is what git grep is asked for: every line the expression
// matches holds one of set (ignoring ASCII case when fold), so the lines
// that hold none need not be read here. The expression still decides;
// literals only ever let through more lines than it matches, never fewer.
type literals struct {
	set  []string // nil: no string is required, every line may match
	fold bool
	none bool // no line can match (every required string spans lines)
}

// Bounds of the analysis: how many strings a node's exact set may hold, a
// character class may stand for, and git may be given.
const (
	maxExact   = 16
	maxClass   = 8
	maxStrings = 256
	maxFolded  = 8 // spellings of one string under Unicode case folding
	maxBytes   = 8 << 10
)

// facts are what the analysis knows of a node: exact, every string it can
// match, when there are few; else required, strings of which each match
// holds one (nil: none is known).
type facts struct {
	exact    []string
	required []string
}

// need is the strings one of which every match of the node holds, or nil.
func (f facts) need() []string {
	if f.exact != nil {
		if slices.Contains(f.exact, "") {
			return nil
		}
		return f.exact
	}
	return f.required
}

// literalsOf reads what git may look for out of the simplified expression.
func literalsOf(re *syntax.Regexp) literals {
	set := analyze(re).need()
	if set == nil {
		return literals{}
	}
	// A match lies within a line, so it holds none of the strings that
	// span two; with none left, nothing can match.
	set = slices.DeleteFunc(slices.Clone(set), func(s string) bool { return strings.Contains(s, "\n") })
	if len(set) == 0 {
		return literals{none: true}
	}
	fold := folds(re)
	var out []string
	for _, s := range set {
		spelt := spellings(s, fold)
		if spelt == nil {
			return literals{} // one alternative requires nothing git can find
		}
		out = append(out, spelt...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	total := 0
	for _, s := range out {
		total += len(s) + 1
	}
	if len(out) > maxStrings || total > maxBytes {
		return literals{}
	}
	return literals{set: out, fold: fold}
}

func analyze(re *syntax.Regexp) facts {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return facts{exact: []string{""}}
	case syntax.OpLiteral:
		return facts{exact: []string{string(re.Rune)}}
	case syntax.OpCharClass:
		return facts{exact: classStrings(re.Rune)}
	case syntax.OpCapture:
		return analyze(re.Sub[0])
	case syntax.OpPlus:
		return facts{required: analyze(re.Sub[0]).need()}
	case syntax.OpRepeat: // Simplify leaves none, but its rule is plain
		if re.Min >= 1 {
			return facts{required: analyze(re.Sub[0]).need()}
		}
	case syntax.OpQuest:
		if sub := analyze(re.Sub[0]); sub.exact != nil && len(sub.exact) < maxExact {
			return facts{exact: union(sub.exact, []string{""})}
		}
	case syntax.OpConcat:
		return concat(re.Sub)
	case syntax.OpAlternate:
		return alternate(re.Sub)
	}
	return facts{} // *, any character, no match: nothing known
}

// concat joins the exact sets of neighbours while they stay small; where a
// run breaks, the run and the part that broke it become candidates, and
// the one that narrows the lines most is required.
func concat(subs []*syntax.Regexp) facts {
	run := []string{""}
	exact := true
	var candidates [][]string
	for _, sub := range subs {
		f := analyze(sub)
		if f.exact != nil && len(run)*len(f.exact) <= maxExact {
			run = cross(run, f.exact)
			continue
		}
		exact = false
		candidates = append(candidates, facts{exact: run}.need(), f.need())
		run = []string{""}
		if f.exact != nil {
			run = f.exact
		}
	}
	if exact {
		return facts{exact: run}
	}
	candidates = append(candidates, facts{exact: run}.need())
	return facts{required: best(candidates)}
}

// alternate is every alternative's: exact while all are and few, else each
// alternative's required strings together (nothing when one has none).
func alternate(subs []*syntax.Regexp) facts {
	var exact, required []string
	allExact, allRequire := true, true
	for _, sub := range subs {
		f := analyze(sub)
		if f.exact == nil {
			allExact = false
		} else if allExact {
			exact = union(exact, f.exact)
		}
		if n := f.need(); n == nil {
			allRequire = false
		} else if allRequire {
			required = union(required, n)
		}
	}
	switch {
	case allExact && len(exact) <= maxExact:
		return facts{exact: exact}
	case allRequire && len(required) <= maxStrings:
		return facts{required: required}
	}
	return facts{}
}

// best is the candidate that narrows most: its shortest string longest,
// then the fewest strings.
func best(candidates [][]string) []string {
	var pick []string
	pickLen := 0
	for _, c := range candidates {
		if c == nil {
			continue
		}
		l := len(slices.MinFunc(c, func(a, b string) int { return len(a) - len(b) }))
		if pick == nil || l > pickLen || l == pickLen && len(c) < len(pick) {
			pick, pickLen = c, l
		}
	}
	return pick
}

// classStrings is each character of a small class, or nil.
func classStrings(ranges []rune) []string {
	n := 0
	for i := 0; i < len(ranges); i += 2 {
		if n += int(ranges[i+1]-ranges[i]) + 1; n > maxClass {
			return nil
		}
	}
	out := make([]string, 0, n)
	for i := 0; i < len(ranges); i += 2 {
		for r := ranges[i]; r <= ranges[i+1]; r++ {
			out = append(out, string(r))
		}
	}
	return out
}

func cross(a, b []string) []string {
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, x+y)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// folds reports whether any literal of the expression ignores case.
func folds(re *syntax.Regexp) bool {
	if re.Op == syntax.OpLiteral && re.Flags&syntax.FoldCase != 0 {
		return true
	}
	return slices.ContainsFunc(re.Sub, folds)
}

// spellings are the strings git must look for to find every line holding
// s, or nil when git cannot be asked for it. git -i folds ASCII letters
// only, and Go's case folding also takes K (U+212A) for k and ſ (U+017F)
// for s, and folds other scripts: those characters are spelt out, each
// way, while there are few spellings; else s shrinks to its longest part
// that needs none. A NUL cannot be given to git (its patterns are lines of
// text), so a string shrinks to its longest part without one too.
func spellings(s string, fold bool) []string {
	plain := func(r rune) bool {
		return r != 0 && (!fold || r < utf8.RuneSelf && !strings.ContainsRune("kKsS", r) || unicode.SimpleFold(r) == r)
	}
	if !strings.ContainsFunc(s, func(r rune) bool { return !plain(r) }) {
		return []string{s}
	}
	if !strings.ContainsRune(s, 0) {
		out := []string{""}
		for _, r := range s {
			ways := []string{string(r)}
			if !plain(r) {
				ways = ways[:0]
				for f := unicode.SimpleFold(r); ; f = unicode.SimpleFold(f) {
					ways = append(ways, string(f))
					if f == r {
						break
					}
				}
			}
			if len(out)*len(ways) > maxFolded {
				out = nil
				break
			}
			out = cross(out, ways)
		}
		if out != nil {
			return out
		}
	}
	longest := ""
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return !plain(r) }) {
		if len(part) > len(longest) {
			longest = part
		}
	}
	if longest == "" {
		return nil
	}
	return []string{longest}
}
