package termdrop

import (
	"slices"
	"testing"
)

// What a shell writes is read the same from a transcript and from the
// screen: outputs are the lines that are only a line's number, whatever
// control sequences and carriage returns surround them, and the typed
// command's echo is never taken for its output.
func TestOutputsAndShellAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []int
		wantShell  int
	}{
		{
			name: "bash with bracketed paste (ttyd)",
			text: "\x1b[?2004hbash-5.2# echo shell-$$\r\n\x1b[?2004l\rshell-19558\r\n\x1b[?2004hbash-5.2# echo $((1000+1))\r\n\x1b[?2004l\r1001\r\n" +
				"\x1b[?2004hbash-5.2# echo $((1000+2))\r\n\x1b[?2004l\r1002\r\n\x1b[?2004hbash-5.2# ",
			want: []int{1, 2}, wantShell: 19558,
		},
		{
			name: "a coloured prompt with a title, a line run twice",
			text: "\x1b]0;me@box: ~\x07\x1b[01;32mme@box\x1b[00m:~$ echo $((1000+7))\r\n1007\r\n\x1b]0;me@box: ~\x1b\\$ echo $((1000+7))\r\n1007\r\n$ ",
			want: []int{7, 7},
		},
		{
			name: "the screen: rows, no control sequences",
			text: "$ echo $((1000+12))\n1012\n$ echo $((1000+13))\n1013\n$ echo $((10",
			want: []int{12, 13},
		},
		{
			name: "keys typed ahead echoed before an output, on its row",
			text: "$ echo $((1000+3))\r\n\x1b[?2004l\r0+51003\r\n$ echo $((1000+4))\r\n1004\r\n$ echo $((1000",
			want: []int{3, 4},
		},
		{
			name: "numbers that are not outputs",
			text: "1000\n 1003x\nshell-1004\n$ echo $((1000\n",
			want: nil, wantShell: 1004,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outputs(tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("outputs = %v, want %v", got, tc.want)
			}
			shell := shellAnswer(tc.text)
			if shell != tc.wantShell {
				t.Errorf("shell = %d, want %d", shell, tc.wantShell)
			}
		})
	}
}
