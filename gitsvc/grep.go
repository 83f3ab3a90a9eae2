package gitsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"atelier/fault"
)

// GrepOptions says which lines Grep asks git for.
type GrepOptions struct {
	// Fixed are strings of which a line must hold one (git grep -F). None
	// asks for every line of every text file.
	Fixed []string
	// IgnoreCase matches Fixed without regard to ASCII case (git grep -i,
	// under LC_ALL=C).
	IgnoreCase bool
	// MaxLine is the longest line handed over whole; a longer one comes
	// with its first MaxLine bytes and Long set. Default 1 MiB.
	MaxLine int
	// Timeout bounds the git process; default Config.Timeout.
	Timeout time.Duration
	// Read, when set, is called each time the output git wrote so far has
	// been handed over, so a caller holding lines may pass them on before
	// git writes more.
	Read func() error
}

// GrepLine is one line git grep found. Text is valid only until the
// callback returns.
type GrepLine struct {
	Path string
	Line int
	Text []byte // without its newline
	Long bool   // the line is longer than MaxLine; Text is its start
}

// ErrStopGrep, returned by Grep's callback, ends the search early; Grep
// then returns nil.
var ErrStopGrep = errors.New("gitsvc: grep stopped")

// grepThreads is how many threads one git grep uses: enough to read a
// large tree quickly, few enough that concurrent searches share the host.
const grepThreads = "--threads=4"

// Grep runs git grep over commit's tree and hands fn each line it finds,
// in path order (git keeps the order of files while its threads read
// them). Binary files (a NUL in their first 8,000 bytes, as git and the
// Code page tell) are passed over. The patterns go to git on its standard
// input (-f -), never as arguments, so no string a person typed can be
// read as an option; the commit must be a full object id. It holds the
// repository's read lock until git ends.
func (s *Service) Grep(ctx context.Context, r *Repo, commit string, o GrepOptions, fn func(GrepLine) error) error {
	if !objectName.MatchString(commit) {
		return fault.Detailf(ErrBadArgument, ": object id %q", commit)
	}
	if o.MaxLine <= 0 {
		o.MaxLine = 1 << 20
	}
	// -z puts a NUL after the name and the line number, so a path may
	// hold any byte but NUL. git 2.39's grep takes no --end-of-options;
	// the revision, a checked object id, is its one argument.
	c := newCommand("grep", "-I", "-n", "-z", "--no-color", grepThreads)
	pattern := "^" // every line
	switch {
	case len(o.Fixed) == 1:
		c.lit("-F")
		pattern = o.Fixed[0]
	case len(o.Fixed) > 1:
		// One pattern: git reads a file ahead to the next match with a
		// single one, and line by line, each time to the end of the
		// file, with several (seconds where one takes milliseconds).
		c.lit("-E")
		var alt strings.Builder
		for i, f := range o.Fixed {
			if i > 0 {
				alt.WriteByte('|')
			}
			alt.WriteString(quoteERE(f))
		}
		pattern = alt.String()
	}
	for _, f := range o.Fixed {
		if f == "" || strings.ContainsAny(f, "\n\x00") {
			return fault.Detailf(ErrBadArgument, ": grep string %q", f)
		}
	}
	if len(pattern) > maxGrepPattern {
		return fault.Detailf(ErrBadArgument, ": grep pattern of %d bytes", len(pattern))
	}
	if o.IgnoreCase && len(o.Fixed) > 0 {
		c.lit("-i")
	}
	c.lit("-f", "-")
	c.val(commit).lit("--")

	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return err
	}
	defer release()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &grepParser{prefix: commit + ":", maxLine: o.MaxLine, fn: fn, read: o.Read, stop: cancel}
	_, err = s.run(gctx, c, runOpts{repo: r, stdin: strings.NewReader(pattern + "\n"), stdout: p, timeout: o.Timeout})
	switch {
	case p.err != nil:
		return p.err
	case p.stopped:
		return nil
	case err != nil && exitCode(err) == 1 && stderrOf(err) == "":
		return nil // git grep's "nothing found"
	case err != nil:
		return err
	}
	if len(p.rest) > 0 || p.state != grepName {
		return fmt.Errorf("gitsvc: grep: output ends inside a record")
	}
	return nil
}

// maxGrepPattern bounds the pattern git compiles.
const maxGrepPattern = 16 << 10

// quoteERE writes s as a POSIX extended expression matching s: each of
// the characters POSIX lets a backslash quote, quoted. Under LC_ALL=C
// every other byte matches itself.
func quoteERE(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`.[\()*+?{|^$`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// grepParser reads `git grep -n -z` output as it is written: records of
// "<commit>:<path>\0<line>\0<text>\n". A path may hold newlines, a text
// NULs; neither is ambiguous read in this order.
type grepParser struct {
	prefix  string
	maxLine int
	fn      func(GrepLine) error
	read    func() error
	stop    func()

	state   int
	rest    []byte // the field being read, up to its end
	path    string
	line    int
	long    bool
	stopped bool
	err     error // the parse failed or fn failed; git is stopped
}

const (
	grepName = iota
	grepNumber
	grepText
)

// maxGrepName bounds a path field; git's own names are far shorter.
const maxGrepName = 64 << 10

func (p *grepParser) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 && !p.stopped && p.err == nil {
		end := byte(0)
		if p.state == grepText {
			end = '\n'
		}
		i := bytes.IndexByte(b, end)
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		switch {
		case p.state == grepText && len(p.rest)+len(chunk) > p.maxLine:
			p.rest = append(p.rest, chunk[:max(0, p.maxLine-len(p.rest))]...)
			p.long = true
		case p.state != grepText && len(p.rest)+len(chunk) > maxGrepName:
			p.fail(fmt.Errorf("gitsvc: grep: a field of over %d bytes", maxGrepName))
			return n, nil
		default:
			p.rest = append(p.rest, chunk...)
		}
		if i < 0 {
			break
		}
		b = b[i+1:]
		p.field()
	}
	if p.read != nil && !p.stopped && p.err == nil {
		p.outcome(p.read())
	}
	return n, nil // once stopped, the rest is dropped while git dies
}

// field takes the field just read whole.
func (p *grepParser) field() {
	switch p.state {
	case grepName:
		name, ok := strings.CutPrefix(string(p.rest), p.prefix)
		if !ok || name == "" {
			p.fail(fmt.Errorf("gitsvc: grep: unexpected name %q", p.rest))
			return
		}
		p.path, p.state = name, grepNumber
	case grepNumber:
		n, err := strconv.Atoi(string(p.rest))
		if err != nil || n <= 0 {
			p.fail(fmt.Errorf("gitsvc: grep: bad line number %q", p.rest))
			return
		}
		p.line, p.state = n, grepText
	case grepText:
		err := p.fn(GrepLine{Path: p.path, Line: p.line, Text: p.rest, Long: p.long})
		p.long, p.state = false, grepName
		p.outcome(err)
	}
	p.rest = p.rest[:0]
}

// outcome takes a callback's answer: go on, stop, or fail.
func (p *grepParser) outcome(err error) {
	if errors.Is(err, ErrStopGrep) {
		p.stopped = true
		p.stop()
	} else if err != nil {
		p.fail(err)
	}
}

func (p *grepParser) fail(err error) {
	p.err = err
	p.stop()
}
