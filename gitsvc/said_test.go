package gitsvc

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// What git said reaches a page as one plain line: nothing a host relays
// can hide text, move it about or paint the terminal of whoever reads the
// log, and a long account keeps its end, where git names the failure.
func TestSaidIsOneBoundedPlainLine(t *testing.T) {
	for _, c := range []struct{ name, stderr, want string }{
		{"lines joined", "remote: Repository not found.\nfatal: repository 'https://h/r.git/' not found\n",
			"remote: Repository not found. fatal: repository 'https://h/r.git/' not found"},
		{"escapes and bells out", "remote: \x1b[31mred\x1b[0m\a\nfatal: x", "remote: [31mred[0m fatal: x"},
		{"a bidirectional override out", "remote: abc\u202edef\u2066g", "remote: abcdefg"},
		{"carriage returns end lines", "progress 1%\rprogress 100%\r\nfatal: y", "progress 1% progress 100% fatal: y"},
		{"tabs and runs of spaces", "fatal:\t  z  ", "fatal: z"},
		{"invalid UTF-8", "fatal: \xff\xfe", "fatal: \uFFFD"},
		{"nothing", "\n \n", ""},
	} {
		if got := (&GitError{Stderr: c.stderr}).Said(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	long := strings.Repeat("remote: é noise\n", 200) + "fatal: the end"
	got := (&GitError{Stderr: long}).Said()
	if len(got) > saidMax+len("…") || !strings.HasPrefix(got, "…") || !strings.HasSuffix(got, "fatal: the end") || !utf8.ValidString(got) {
		t.Errorf("a long account: %d bytes %q", len(got), got)
	}
}

// A source's credentials are starred out of git's words wherever they
// stand; a short one, which ordinary words may hold, withholds them all,
// unless the URL git was given (which never holds the credentials) is
// the only place it turns up.
func TestWithoutSecrets(t *testing.T) {
	url := "https://h/bob/repo.git"
	for _, c := range []struct {
		name, text string
		secrets    []string
		want       string
	}{
		{"a token starred", "remote: token abcdefgh12345 refused", []string{"bob", "abcdefgh12345"}, "remote: token *** refused"},
		{"a token inside a longer one", "remote: xx-abcdefgh12345-yy", []string{"abcdefgh12345", "xx-abcdefgh12345-yy"}, "remote: ***"},
		{"a short user in the URL", "fatal: repository '" + url + "/' not found", []string{"bob", "abcdefgh12345"}, "fatal: repository '" + url + "/' not found"},
		{"a short user elsewhere", "remote: bob may not read " + url, []string{"bob", "abcdefgh12345"}, ""},
		{"a short password elsewhere", "remote: pw12 refused", []string{"someone-long", "pw12"}, ""},
		{"empty values", "fatal: x", []string{"", ""}, "fatal: x"},
	} {
		if got := withoutSecrets(c.text, url, c.secrets); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
