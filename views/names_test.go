package views

import "testing"

// shown writes each character a browser would hide or reorder as an
// escape set apart from the name, and the rest as escaped HTML.
func TestShown(t *testing.T) {
	esc := func(s string) string { return `<span class="esc">` + s + `</span>` }
	tests := []struct{ in, want string }{
		{"src/main.go", "src/main.go"},
		{"a b.txt", "a b.txt"},
		{"ünï/cødé ✓", "ünï/cødé ✓"},
		{"a\nb.txt", "a" + esc(`\x0a`) + "b.txt"},
		{"\x1b[31mred", esc(`\x1b`) + "[31mred"},
		{"del\x7f", "del" + esc(`\x7f`)},
		{"c1\u0085", "c1" + esc(`\u0085`)},
		{"evil\u202etxt.exe", "evil" + esc(`\u202e`) + "txt.exe"},
		{"iso\u2066late", "iso" + esc(`\u2066`) + "late"},
		{".g\u200dit", ".g" + esc(`\u200d`) + "it"},
		{"tag\U000e0001", "tag" + esc(`\U000e0001`)},
		{"nbsp\u00a0", "nbsp" + esc(`\u00a0`)},
		{"bad\xff", "bad" + esc(`\xff`)},
		{"   ", esc(`\x20`) + esc(`\x20`) + esc(`\x20`)},
		{"src/ /x", "src/" + esc(`\x20`) + "/x"},
		{"<b>&amp;", "&lt;b&gt;&amp;amp;"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := string(shown(tt.in)); got != tt.want {
			t.Errorf("shown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// A piece of a path may be the spaces inside a name.
	if got := string(shownPiece(" ")); got != " " {
		t.Errorf("shownPiece(\" \") = %q", got)
	}
	if got := string(shownPiece("\x1b")); got != esc(`\x1b`) {
		t.Errorf("shownPiece(ESC) = %q", got)
	}
}
