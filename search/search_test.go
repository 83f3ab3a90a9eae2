package search

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp/syntax"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"atelier/fault"
	"atelier/testrig/pgtest"
)

// The benchmarks read sizes through a code store over PostgreSQL.
func TestMain(m *testing.M) { pgtest.Main(m) }

func mustCompile(t *testing.T, q Query) *Matcher {
	t.Helper()
	m, err := Compile(q)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", q, err)
	}
	return m
}

// A query is refused before it runs when it is empty, too long, not text,
// not an expression, or one that compiles to too large a program; each
// refusal has its reason.
func TestCompileRefusesBadAndHostilePatterns(t *testing.T) {
	cases := []struct {
		q      Query
		reason string
	}{
		{Query{Text: ""}, "empty_query"},
		{Query{Text: strings.Repeat("a", MaxPatternBytes+1)}, "query_too_long"},
		{Query{Text: "\xff"}, "bad_query"},
		{Query{Text: "a(b", Regex: true}, "bad_pattern"},
		{Query{Text: `\8`, Regex: true}, "bad_pattern"},
		{Query{Text: "(a{1000}){1000}", Regex: true}, "bad_pattern"}, // Go's parser refuses the count
		{Query{Text: "[a-z]{999}[0-9]{3}", Regex: true}, "pattern_too_complex"},
		{Query{Text: strings.Repeat("(x|y)?", 50) + "z{900}", Regex: true}, "pattern_too_complex"},
	}
	for _, c := range cases {
		_, err := Compile(c.q)
		var f fault.Error
		if err == nil || !errors.As(err, &f) || f.Fault().Reason != c.reason {
			t.Errorf("Compile(%.40q regex=%v) = %v, want the reason %s", c.q.Text, c.q.Regex, err, c.reason)
		}
	}
	// The same text as a literal is no expression at all.
	if _, err := Compile(Query{Text: "a(b"}); err != nil {
		t.Errorf("a literal a(b: %v", err)
	}
	if _, err := Compile(Query{Text: strings.Repeat("a", MaxPatternBytes)}); err != nil {
		t.Errorf("a literal of the longest length: %v", err)
	}
}

// hostilePatterns make backtracking engines run for ever.
var hostilePatterns = []string{`(a+)+b`, `(a|aa)*c`, `(a*)*$x`, `(?:a?){30}a{30}$`, `(\w+\s?)+z`, `[a-z]{990}[0-9]`, `(?i)[a-z]{50}[0-9]`}

// RE2 matches a line in time proportional to its length times the
// program's size, so a hostile pattern costs what the line budget allows:
// no line searched is longer than the budget over the program's size. A
// large program passes over the lines past that and still reads the
// shorter ones. (What a megabyte line costs each pattern is measured by
// BenchmarkHostilePatterns.)
func TestHostilePatternsRunInBoundedTime(t *testing.T) {
	for _, p := range hostilePatterns {
		m := mustCompile(t, Query{Text: p, Regex: true})
		parsed, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(parsed.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if work := m.maxLine * len(prog.Inst); work > lineBudget {
			t.Errorf("%s: lines of %d bytes × %d instructions = %d steps, over the budget of %d", p, m.maxLine, len(prog.Inst), work, lineBudget)
		}
	}
	m := mustCompile(t, Query{Text: `[a-z]{990}[0-9]`, Regex: true})
	matching := func(n int) []byte { return append(bytes.Repeat([]byte("a"), n-1), '7') }
	if _, found := m.Text("f", matching(2001)); !found {
		t.Error("a 2,001-byte line was not searched")
	}
	if _, found := m.Text("f", matching(m.maxLine)); !found {
		t.Errorf("a line of %d bytes, the longest searched, was not searched", m.maxLine)
	}
	if _, found := m.Text("f", matching(m.maxLine+1)); found {
		t.Errorf("a line of %d bytes, past the budget, was searched", m.maxLine+1)
	}
	if lit := mustCompile(t, Query{Text: "a7"}); lit.maxLine < MaxFileBytes {
		t.Errorf("a literal reads lines of %d bytes only, not every line of a file within MaxFileBytes", lit.maxLine)
	}
}

// literals lets through every line the expression matches: on many random
// lines over an alphabet of ASCII letters and their Unicode folds, a line
// that matches always holds one of the strings git is asked for.
func TestLiteralsNeverHideAMatch(t *testing.T) {
	patterns := []struct {
		text         string
		regex, match bool
	}{
		{"sk", false, false}, {"Kas", false, false}, {"ſk", false, true}, {"é", false, false},
		{"ab", false, true}, {`a[bk]s`, true, false}, {`(ab|ks)+e`, true, false}, {`k.*s`, true, false},
		{`^as`, true, false}, {`s$`, true, true}, {`[a-z]+K`, true, true}, {`(?i)é|b`, true, true},
		{`a?b?c`, true, false}, {`x*`, true, false}, {`(?:ab){2,3}`, true, false}, {`\bka\b`, true, false},
		{`[^a]s`, true, false}, {`(?i)[ks]{3}`, true, true}, {`a(?-i:K)s`, true, false},
	}
	alphabet := []rune("abcekKsS\u212a\u017féÉ .")
	r := rand.New(rand.NewPCG(1, 2))
	lines := make([]string, 20000)
	for i := range lines {
		b := make([]rune, 1+r.IntN(8))
		for j := range b {
			b[j] = alphabet[r.IntN(len(alphabet))]
		}
		lines[i] = string(b)
	}
	for _, p := range patterns {
		m := mustCompile(t, Query{Text: p.text, Regex: p.regex, Case: p.match})
		matched := 0
		for _, l := range lines {
			if !m.re.MatchString(l) {
				continue
			}
			matched++
			if m.lits.none || m.lits.set != nil && !holdsAny(l, m.lits) {
				t.Fatalf("%q (regex %v, case %v) matches %q, which holds none of %q (fold %v, none %v)", p.text, p.regex, p.match, l, m.lits.set, m.lits.fold, m.lits.none)
			}
		}
		if matched == 0 {
			t.Errorf("%q matched no line: the case proves nothing", p.text)
		}
	}
}

func holdsAny(line string, l literals) bool {
	for _, s := range l.set {
		if strings.Contains(line, s) || l.fold && strings.Contains(asciiLower(line), asciiLower(s)) {
			return true
		}
	}
	return false
}

func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// The strings git is asked for narrow the lines well where the pattern
// allows, and a pattern no line can match asks git for nothing.
func TestLiteralsNarrow(t *testing.T) {
	cases := []struct {
		text  string
		regex bool
		want  string // the strings, space-separated; "*" every line; "-" none
	}{
		{"hello world", false, "hello world"},
		{`func\s+main`, true, "func"},
		{`(foo|bar)baz`, true, "barbaz foobaz"},
		{`[0-9]+px`, true, "px"},
		{`\w+`, true, "*"},
		{`a\nb`, true, "-"},
		// Folded: k and s have spellings git -i does not know, spelt out
		// while few, else the longest part without them.
		{"test", false, "TEST TEsT TE\u017fT"},
		{"ok", false, "OK Ok O\u212a"},
		{"sassy ass", false, "Y A"},
	}
	for _, c := range cases {
		m := mustCompile(t, Query{Text: c.text, Regex: c.regex, Case: c.text == "hello world" || c.regex})
		got := strings.Join(m.lits.set, " ")
		switch {
		case m.lits.none:
			got = "-"
		case m.lits.set == nil:
			got = "*"
		}
		if got != c.want {
			t.Errorf("literals of %q = %q, want %q", c.text, got, c.want)
		}
	}
}

// A file's lines: binary and oversized files are passed over, "$" matches
// before a CRLF, a line's matches are marked, a long line is cut around
// its first match between characters, and a file shows at most MaxPerFile
// lines.
func TestTextMatchesLines(t *testing.T) {
	m := mustCompile(t, Query{Text: `needle$`, Regex: true})
	f, ok := m.Text("a.txt", []byte("hay\r\nneedle\r\nneedle hay\nneedle"))
	if !ok || len(f.Lines) != 2 || f.Lines[0].Line != 2 || f.Lines[1].Line != 4 || f.Lines[0].Text != "needle" {
		t.Fatalf("CRLF file: %+v", f)
	}
	if _, ok := m.Text("b", []byte("needle\x00")); ok {
		t.Error("a binary file was searched")
	}
	if _, ok := m.Text("big", append(bytes.Repeat([]byte("x\n"), MaxFileBytes/2), "needle"...)); ok {
		t.Error("a file over MaxFileBytes was searched")
	}

	m = mustCompile(t, Query{Text: "ab"})
	long := strings.Repeat("é", 100) + "xAbx" + strings.Repeat("ü", 200) + "ab"
	f, _ = m.Text("c", []byte(long))
	l := f.Lines[0]
	if l.Column != 202 || !l.CutStart || !l.CutEnd || len(l.Text) > textWindow || strings.ContainsRune(l.Text, '\uFFFD') {
		t.Fatalf("long line: column %d, cut %v %v, %d bytes %q", l.Column, l.CutStart, l.CutEnd, len(l.Text), l.Text)
	}
	if got := l.Text[l.Ranges[0][0]:l.Ranges[0][1]]; len(l.Ranges) != 1 || got != "Ab" {
		t.Fatalf("ranges %v mark %q", l.Ranges, got)
	}

	many := strings.Repeat("ab\n", MaxPerFile+5)
	f, _ = m.Text("d", []byte(many))
	if len(f.Lines) != MaxPerFile || !f.More {
		t.Fatalf("a file of %d matching lines gave %d, more %v", MaxPerFile+5, len(f.Lines), f.More)
	}
}

// Run stops at MaxMatches, says the answer is cut, counts files once
// though they come in pieces, and returns emit's error.
func TestRunCapsTheAnswer(t *testing.T) {
	m := mustCompile(t, Query{Text: "x"})
	src := func(ctx context.Context, m *Matcher, emit func(File) error) error {
		for i := 0; ; i++ {
			f := File{Path: fmt.Sprintf("f%04d", i/2)}
			for j := 0; j < 30; j++ {
				f.Lines = append(f.Lines, Line{Line: j + 1})
			}
			if err := emit(f); err != nil {
				return err
			}
		}
	}
	var got int
	sum, err := Run(context.Background(), m, src, func(f File) error { got += len(f.Lines); return nil })
	if err != nil || got != MaxMatches || sum.Matches != MaxMatches || !sum.Truncated || sum.Files != 17 {
		t.Fatalf("Run = %+v, %v; %d lines handed on", sum, err, got)
	}
	boom := errors.New("boom")
	if _, err := Run(context.Background(), m, src, func(File) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("emit's error: %v", err)
	}
}

// Files reads a few at a time and hands files on in path order; a search
// that stops leaves no reader behind.
func TestFilesKeepsPathOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := mustCompile(t, Query{Text: "hit"})
	var paths []string
	for i := 0; i < 500; i++ {
		paths = append(paths, fmt.Sprintf("p%03d", i))
	}
	read := func(p string) []byte {
		if p[len(p)-1] == '7' {
			return nil // unreadable: passed over
		}
		// Not a wait: readers that take uneven times finish out of order,
		// which is what the path order must survive.
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		return []byte("hit " + p + "\n")
	}
	var got []string
	sum, err := Run(context.Background(), m, Files(paths, read), func(f File) error { got = append(got, f.Path); return nil })
	if err != nil || len(got) != 450 || sum.Files != 450 {
		t.Fatalf("%d files, %+v, %v", len(got), sum, err)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("out of order: %s then %s", got[i-1], got[i])
		}
	}
	stop := errors.New("stop")
	n := 0
	if _, err := Run(context.Background(), m, Files(paths, read), func(File) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("stopped: %v", err)
	}
}
