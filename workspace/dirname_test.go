package workspace

import (
	"strings"
	"testing"
)

func TestValidDirName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"app", true},
		{"My-App_2", true},
		{"-", true},
		{"_", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"/abs", false},
		{"a b", false},
		{"a.b", false},
		{"café", false},
		{"проект", false},
		{"a\x00", false},
		{"a\n", false},
	}
	for _, tt := range tests {
		if got := ValidDirName(tt.name); got != tt.want {
			t.Errorf("ValidDirName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDirNameFrom(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"app", "app"},
		{"My Project", "My-Project"},
		{"  hello   world  ", "hello-world"},
		{"a - b", "a-b"},
		{"--x--", "x"},
		{"snake_case_name", "snake_case_name"},
		{"Café crème", "Caf-cr-me"},
		{"Проект", "project"},
		{"数据 2024", "2024"},
		{"", "project"},
		{"   ", "project"},
		{"!\"#$%&'()*+,-./:;<=>?@[\\]^`{|}~", "project"},
		{"../../etc/passwd", "etc-passwd"},
		{"a\x00b", "a-b"},
		{strings.Repeat("a", 200), strings.Repeat("a", 56)},
		{strings.Repeat("a", 55) + " bcd", strings.Repeat("a", 55)},
		{strings.Repeat("a", 54) + " bcd", strings.Repeat("a", 54) + "-b"},
		{strings.Repeat("ab ", 100), strings.TrimSuffix(strings.Repeat("ab-", 19), "-")},
	}
	for _, tt := range tests {
		got := DirNameFrom(tt.in)
		if got != tt.want {
			t.Errorf("DirNameFrom(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !ValidDirName(got) || len(got) > 56 {
			t.Errorf("DirNameFrom(%q) = %q: not a valid name of at most 56 characters", tt.in, got)
		}
	}
}

func TestDirNameCandidate(t *testing.T) {
	long := strings.Repeat("x", 64)
	tests := []struct {
		base string
		n    int
		want string
	}{
		{"app", 1, "app"},
		{"app", 0, "app"},
		{"app", 2, "app-2"},
		{"app", 10, "app-10"},
		{strings.Repeat("a", 56), 999999, strings.Repeat("a", 56) + "-999999"},
		{long, 2, strings.Repeat("x", 62) + "-2"},
		{long, 1, long},
		{"My Project", 3, "My-Project-3"},
		{"", 2, "project-2"},
	}
	for _, tt := range tests {
		got := DirNameCandidate(tt.base, tt.n)
		if got != tt.want {
			t.Errorf("DirNameCandidate(%q, %d) = %q, want %q", tt.base, tt.n, got, tt.want)
		}
		if !ValidDirName(got) {
			t.Errorf("DirNameCandidate(%q, %d) = %q is not valid", tt.base, tt.n, got)
		}
	}
	if got := DirNameCandidate(long, int(^uint(0)>>1)); !ValidDirName(got) {
		t.Errorf("DirNameCandidate with the largest n = %q is not valid", got)
	}
}
