// Package search finds text in the files of a tree: a literal or a regular
// expression (Go's RE2 syntax, which runs in time linear in what it reads),
// line by line, bounded in what one query may cost. A tree in git is read
// by git grep, asked for the lines that hold a string every match must
// hold and checked here with the expression itself; files held elsewhere
// (a session's edits, a Local folder) are read and matched here. Results
// come in path order, a file's lines together, as they are found.
package search

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"time"
	"unicode/utf8"

	"atelier/fault"
)

// Bounds of one search. A pattern is something typed into a box; its
// compiled program bounds the work per byte read; the caps bound what the
// answer holds; the timeout bounds everything else.
const (
	MaxPatternBytes = 512
	MaxProgram      = 1000 // instructions of the compiled expression
	MaxMatches      = 1000 // matching lines in one answer
	MaxPerFile      = 100  // matching lines shown of one file
	MaxFileBytes    = 1 << 20
	// MaxRanges bounds the marked matches of one line.
	MaxRanges = 20
	Timeout   = 10 * time.Second
	// lineBudget bounds the work of matching one line, which nothing can
	// interrupt: RE2 takes time in proportion to the line's length times,
	// at worst, its program's size (about 40 ns each here), so a line
	// longer than lineBudget / program size is not searched. A literal's
	// program is a few instructions, so every line of a file within
	// MaxFileBytes is; a large expression reads lines of some thousands of
	// bytes. The timeout is checked between lines, so no search outlasts
	// it by more than about a second.
	lineBudget = 1 << 25
	// textWindow is the most of a line an answer shows, cut around its
	// first match, textBefore of it before the match.
	textWindow = 240
	textBefore = 60
	// binarySniff is how much of a file is searched for a NUL byte to call
	// it binary, as git and the Code page do.
	binarySniff = 8000
)

var (
	ErrEmptyQuery  = fault.New(fault.BadInput, "empty_query", "search: empty query", "Type something to search for.")
	ErrQueryLong   = fault.New(fault.BadInput, "query_too_long", fmt.Sprintf("search: a query is at most %d bytes", MaxPatternBytes), fmt.Sprintf("The search is too long (at most %d bytes).", MaxPatternBytes))
	ErrQueryText   = fault.New(fault.BadInput, "bad_query", "search: the query is not UTF-8", "The search must be text.")
	ErrBadPattern  = fault.New(fault.BadInput, "bad_pattern", "search: not a regular expression", "That is not a valid regular expression")
	ErrPatternSize = fault.New(fault.BadInput, "pattern_too_complex", "search: the expression compiles to too large a program", "The regular expression is too complex; make it simpler.")
)

// Query is what a person searches for.
type Query struct {
	Text  string `json:"query"`
	Regex bool   `json:"regex"` // Text is a regular expression, else a literal
	Case  bool   `json:"case"`  // match case; else case is ignored (Unicode folding)
}

// Matcher is a compiled query.
type Matcher struct {
	Query   Query
	re      *regexp.Regexp
	lits    literals
	maxLine int // the longest line searched (lineBudget)
}

// Compile checks q and compiles it: a pattern of at most MaxPatternBytes,
// valid UTF-8, in RE2 syntax when q.Regex, whose program has at most
// MaxProgram instructions.
func Compile(q Query) (*Matcher, error) {
	switch {
	case q.Text == "":
		return nil, ErrEmptyQuery
	case len(q.Text) > MaxPatternBytes:
		return nil, ErrQueryLong
	case !utf8.ValidString(q.Text):
		return nil, ErrQueryText
	}
	expr := q.Text
	if !q.Regex {
		expr = regexp.QuoteMeta(expr)
	}
	if !q.Case {
		expr = "(?i)" + expr
	}
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) && se.Code == syntax.ErrLarge {
			return nil, ErrPatternSize
		}
		return nil, fault.Detailf(ErrBadPattern, ": %v", err)
	}
	parsed = parsed.Simplify()
	prog, err := syntax.Compile(parsed)
	if err != nil || len(prog.Inst) > MaxProgram {
		return nil, ErrPatternSize
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fault.Detailf(ErrBadPattern, ": %v", err)
	}
	return &Matcher{Query: q, re: re, lits: literalsOf(parsed), maxLine: lineBudget / len(prog.Inst)}, nil
}

// Line is one matching line.
type Line struct {
	Line int `json:"line"`
	// Column is where the first match starts in the whole line, in bytes
	// from 1.
	Column int `json:"column"`
	// Text is the line, or the part of it around the first match when it
	// is long (CutStart, CutEnd say which ends are missing), without its
	// line ending.
	Text     string `json:"text"`
	CutStart bool   `json:"cutStart,omitempty"`
	CutEnd   bool   `json:"cutEnd,omitempty"`
	// Ranges are the matches in Text, as [start, end) byte offsets; an
	// empty match marks nothing.
	Ranges [][2]int `json:"ranges"`
}

// File is matching lines of one file, in line order. Consecutive Files of
// a stream may name the same path: the later goes on with the same file.
type File struct {
	Path  string
	Lines []Line
	// More says the file has more matching lines than MaxPerFile.
	More bool
}

// Summary says how a search ended.
type Summary struct {
	Files   int `json:"files"`   // files with a matching line
	Matches int `json:"matches"` // matching lines
	// Truncated: the search stopped at MaxMatches, or a file had more
	// than MaxPerFile: the answer may not hold every match.
	Truncated bool `json:"truncated"`
	// TimedOut: the search ran out of time; what it found is the answer.
	TimedOut bool `json:"timedOut"`
	// Partial: a Local folder had more files than a search reads.
	Partial bool `json:"partial,omitempty"`
}

// Source hands the matching files of a tree to emit, in path order, and
// stops when emit returns an error (which it returns).
type Source func(ctx context.Context, m *Matcher, emit func(File) error) error

// errEnough stops a source once the answer is full.
var errEnough = errors.New("search: the answer is full")

// Run searches src with m for at most Timeout, handing each file to emit
// as it is found, and says how it ended. The answer holds at most
// MaxMatches lines; a search that runs out of time answers what it found.
// An error of emit ends the search and is returned.
func Run(ctx context.Context, m *Matcher, src Source, emit func(File) error) (Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	var sum Summary
	last := ""
	err := src(ctx, m, func(f File) error {
		if room := MaxMatches - sum.Matches; len(f.Lines) > room {
			f.Lines = f.Lines[:room]
		}
		if len(f.Lines) > 0 && f.Path != last {
			sum.Files++
			last = f.Path
		}
		sum.Matches += len(f.Lines)
		sum.Truncated = sum.Truncated || f.More || sum.Matches == MaxMatches
		if len(f.Lines) > 0 || f.More {
			if err := emit(f); err != nil {
				return err
			}
		}
		if sum.Matches == MaxMatches {
			return errEnough
		}
		return nil
	})
	switch {
	case errors.Is(err, errEnough):
		return sum, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		sum.TimedOut = true
		return sum, nil
	}
	return sum, err
}

// Text matches the content of one file: nothing for a binary file or one
// over MaxFileBytes, else up to MaxPerFile lines (More says there were
// more).
func (m *Matcher) Text(path string, content []byte) (File, bool) {
	f := File{Path: path}
	if len(content) > MaxFileBytes || bytes.IndexByte(content[:min(len(content), binarySniff)], 0) >= 0 {
		return f, false
	}
	for n := 1; len(content) > 0; n++ {
		line := content
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			line, content = content[:i], content[i+1:]
		} else {
			content = nil
		}
		l, ok := m.line(n, line)
		if !ok {
			continue
		}
		if len(f.Lines) == MaxPerFile {
			f.More = true
			break
		}
		f.Lines = append(f.Lines, l)
	}
	return f, len(f.Lines) > 0
}

// line matches one line (without its newline; a carriage return before it
// is dropped too, so "$" matches at the end of a CRLF line). A line longer
// than the matcher's maxLine is not searched.
func (m *Matcher) line(n int, text []byte) (Line, bool) {
	text = bytes.TrimSuffix(text, []byte{'\r'})
	if len(text) > m.maxLine {
		return Line{}, false
	}
	found := m.re.FindAllIndex(text, MaxRanges)
	if found == nil {
		return Line{}, false
	}
	return cut(n, text, found), true
}

// cut is the line as an answer shows it: whole when short, else the
// textWindow bytes around its first match, cut between characters.
func cut(n int, text []byte, found [][]int) Line {
	first := found[0][0]
	from, to := 0, len(text)
	if len(text) > textWindow {
		from = max(0, first-textBefore)
		for from > 0 && from < len(text) && !utf8.RuneStart(text[from]) {
			from++
		}
		to = min(len(text), from+textWindow)
		for to < len(text) && to > from && !utf8.RuneStart(text[to]) {
			to--
		}
	}
	l := Line{Line: n, Column: first + 1, Text: string(text[from:to]), CutStart: from > 0, CutEnd: to < len(text), Ranges: [][2]int{}}
	for _, r := range found {
		s, e := max(r[0], from), min(r[1], to)
		if s < e {
			l.Ranges = append(l.Ranges, [2]int{s - from, e - from})
		}
	}
	return l
}
