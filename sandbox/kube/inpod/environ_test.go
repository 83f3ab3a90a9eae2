package inpod

import (
	"slices"
	"testing"
)

// A command's and a shell's environment: the container's, with TERM
// naming what reads the output (one TERM, whatever the image set) and
// LANG C.UTF-8 unless the image chose one.
func TestEnviron(t *testing.T) {
	for _, c := range []struct {
		env  []string
		term string
		want []string
	}{
		{[]string{"PATH=/bin", "HOME=/home/atelier"}, "dumb",
			[]string{"PATH=/bin", "HOME=/home/atelier", "LANG=C.UTF-8", "TERM=dumb"}},
		{[]string{"TERM=linux", "LANG=de_DE.UTF-8", "PATH=/bin", "TERM=vt100"}, "xterm-256color",
			[]string{"LANG=de_DE.UTF-8", "PATH=/bin", "TERM=xterm-256color"}},
	} {
		if got := environ(c.env, c.term); !slices.Equal(got, c.want) {
			t.Errorf("environ(%q, %q) = %q, want %q", c.env, c.term, got, c.want)
		}
	}
}
