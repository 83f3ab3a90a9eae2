package workspace

import (
	"fmt"
	"strconv"
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

// A new project's folder name is valid for every name and id, and no two
// projects' names meet: not two new ones (whatever their names), and not a
// new one and a name the earlier scheme gave (DirNameFrom, then "-2" …).
func TestDirNameFor(t *testing.T) {
	const maxID = int64(^uint64(0) >> 1)
	tests := []struct {
		name string
		id   int64
		want string
	}{
		{"app", 17, "app--17"},
		{"My Project", 3, "My-Project--3"},
		{"日本", 18, "project--18"},
		{"!!!", 19, "project--19"},
		{"a - b -", 1, "a-b--1"},
		{strings.Repeat("a", 200), 5, strings.Repeat("a", 56) + "--5"},
		{strings.Repeat("a", 200), maxID, strings.Repeat("a", 64-2-19) + "--9223372036854775807"},
		{strings.Repeat("ab ", 30), maxID, strings.Repeat("ab-", 14) + "a--9223372036854775807"},
		{strings.Repeat("a", 42) + " b", maxID, strings.Repeat("a", 42) + "--9223372036854775807"},
		{strings.Repeat("ab ", 30) + "x", 10, strings.TrimSuffix(strings.Repeat("ab-", 19), "-") + "--10"},
	}
	for _, tt := range tests {
		got := DirNameFor(tt.name, tt.id)
		if got != tt.want {
			t.Errorf("DirNameFor(%q, %d) = %q, want %q", tt.name, tt.id, got, tt.want)
		}
		if !ValidDirName(got) {
			t.Errorf("DirNameFor(%q, %d) = %q is not valid", tt.name, tt.id, got)
		}
	}

	names := []string{"", "a", "a 1", "a-1", "a--1", "1", "project", "project 2", "日本", "a 1 1", strings.Repeat("z", 70)}
	seen := map[string]string{}
	for _, n := range names {
		// The earlier scheme's every candidate for this name.
		base := DirNameFrom(n)
		for k := 1; k <= 100; k++ {
			old := base
			if k > 1 {
				old += "-" + strconv.Itoa(k)
			}
			seen[old] = "earlier " + n
		}
	}
	// Each project its own id, the short ones and the longest alike.
	id := int64(0)
	for _, n := range names {
		for _, step := range []int64{1, 1, 9, 1, 88, 1} {
			id += step
			got := DirNameFor(n, id)
			who := fmt.Sprintf("%q as project %d", n, id)
			if other, ok := seen[got]; ok {
				t.Errorf("%s gets %q, as %s did", who, got, other)
			}
			seen[got] = who
		}
	}
	for i, n := range names {
		id := maxID - int64(i)
		got := DirNameFor(n, id)
		if other, ok := seen[got]; ok {
			t.Errorf("%q as project %d gets %q, as %s did", n, id, got, other)
		}
		seen[got] = n
	}
}
