package gitsvc

import (
	"cmp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// saidMax bounds what Said returns, in bytes.
const saidMax = 500

// shortSecret is the length under which a user name or password is not
// replaced where git's words hold it but withholds them: a short value
// turns up in ordinary words, and starring it out there would show where
// the rest of the message does not hold it.
const shortSecret = 8

// Said is git's own account of the failure as a person may read it: the
// lines of its stderr, with control characters and bidirectional controls
// left out, joined into one line, and of a long account only the end,
// where git says what went wrong, at most 500 bytes. It is "" when git
// wrote nothing, or when its words were withheld because they hold a
// source's credentials (FetchInto).
func (e *GitError) Said() string {
	var lines []string
	for _, l := range strings.FieldsFunc(strings.ToValidUTF8(e.Stderr, "\uFFFD"), func(r rune) bool { return r == '\n' || r == '\r' }) {
		l = strings.Join(strings.Fields(strings.Map(printable, l)), " ")
		if l != "" {
			lines = append(lines, l)
		}
	}
	said := strings.Join(lines, " ")
	if len(said) <= saidMax {
		return said
	}
	cut := len(said) - saidMax
	for cut < len(said) && !utf8.RuneStart(said[cut]) {
		cut++
	}
	return "…" + said[cut:]
}

// printable maps a control character to a space and drops the marks that
// reorder text, so nothing git relays from a host can hide or rearrange
// what a page shows.
func printable(r rune) rune {
	switch {
	case r == '\t':
		return ' '
	case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
		return -1
	}
	return r
}

// withoutSecrets keeps a source's user name and password out of text git
// wrote: a long one is starred out wherever it is; a short one that text
// holds outside the URL git was given (which never holds them) withholds
// the whole text, which is then "".
func withoutSecrets(text, url string, secrets []string) string {
	secrets = slices.DeleteFunc(slices.Clone(secrets), func(s string) bool { return s == "" })
	// Longest first, so no part of a long one is left behind a shorter.
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, s := range secrets {
		if len(s) >= shortSecret {
			text = strings.ReplaceAll(text, s, "***")
		}
	}
	outside := strings.ReplaceAll(text, url, "\x00")
	for _, s := range secrets {
		if len(s) < shortSecret && strings.Contains(outside, s) {
			return ""
		}
	}
	return text
}
