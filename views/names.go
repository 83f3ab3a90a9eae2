package views

import (
	"fmt"
	"html/template"
	"strings"
	"unicode"
	"unicode/utf8"
)

// shown writes a file name or path so that a person sees every character
// it holds. A browser draws a control character as nothing, lets a
// bidirectional override reorder what follows ("txt.exe" read as
// "exe.txt"), and a name of spaces as a gap; git and a Local folder's
// owner can write all of them. So every rune that is not printable (C0,
// DEL, C1, format characters such as U+202E and zero-width joiners,
// separators other than the ASCII space, unassigned code points) and
// every byte that is not UTF-8 is written as an escape in Go's spelling
// (\x1b, \u202e, \U000e0001, \xff), and so is each space of a part made
// only of spaces. Escapes sit in <span class="esc">, styled apart, so a
// file really called `\x1b` does not read like an escape; the rest is
// HTML-escaped text.
func shown(p string) template.HTML {
	var b strings.Builder
	for i, part := range strings.Split(p, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		writeShown(&b, part, part != "" && strings.Trim(part, " ") == "")
	}
	return template.HTML(b.String())
}

// shownPiece is shown for a piece of a path, such as one of quick open's
// runs of matched characters, where a run of spaces may be part of a name:
// only what is not printable is escaped.
func shownPiece(s string) template.HTML {
	var b strings.Builder
	writeShown(&b, s, false)
	return template.HTML(b.String())
}

// writeShown writes s to b as shown describes, escaping its spaces too
// when blank.
func writeShown(b *strings.Builder, s string, blank bool) {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			escaped(b, `\x%02x`, s[0])
		case r == ' ' && blank:
			escaped(b, `\x%02x`, r)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(template.HTMLEscapeString(s[:size]))
		case r < utf8.RuneSelf:
			escaped(b, `\x%02x`, r)
		case r <= 0xffff:
			escaped(b, `\u%04x`, r)
		default:
			escaped(b, `\U%08x`, r)
		}
		s = s[size:]
	}
}

func escaped(b *strings.Builder, format string, v any) {
	b.WriteString(`<span class="esc">`)
	fmt.Fprintf(b, format, v)
	b.WriteString(`</span>`)
}
