package handlers

import "testing"

// Every value an attacker could hand a sign-in link lands on the projects
// list; local paths survive exactly as given.
func TestSafeNext(t *testing.T) {
	for _, tc := range []struct{ next, want string }{
		{"//evil.example", "/projects"},
		{`/\evil.example`, "/projects"},
		{"/\t/evil.example", "/projects"},
		{"/%09/evil.example", "/projects"},
		{"/%0a/evil.example", "/projects"},
		{"/%7F/evil.example", "/projects"},
		{"/\x7f/evil.example", "/projects"},
		{"/%2F%2Fevil.example", "/projects"},
		{"/%2f%2fevil.example", "/projects"},
		{"/%5C%5Cevil.example", "/projects"},
		{"/%5cevil.example", "/projects"},
		{"/projects%2f..%2f..", "/projects"},
		{"https://evil.example", "/projects"},
		{"javascript:alert(1)", "/projects"},
		{"evil.example", "/projects"},
		{"", "/projects"},
		{"/%zz", "/projects"},
		{"/projects/3/code?path=a%20b", "/projects/3/code?path=a%20b"},
		{"/projects/3/code?path=src%2Fmain.go", "/projects/3/code?path=src%2Fmain.go"},
		{"/projects/new", "/projects/new"},
		{"/", "/"},
	} {
		if got := safeNext(tc.next); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
}
