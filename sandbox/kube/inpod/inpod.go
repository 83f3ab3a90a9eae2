// Package inpod is the helper that runs inside a Kubernetes sandbox pod:
// the atelier binary started as `atelier sandbox-pod <verb>` through
// Kubernetes exec, which can neither signal a process nor bound its time.
// It runs a command under limits and kills all it started (run), writes a
// tar stream into the workspace (unpack), reports what changed there
// (changes), ends every process of the pod (killall) and is each
// container's main process, which reaps orphans and, in the commands'
// container, runs each command on the exec stream that run hands it, out
// of the command's reach (idle -supervise). It answers in frames
// (WriteFrame), which the server reads with a FrameReader, treating every
// byte as hostile: the session's code runs as the same user as the
// helper and may tamper with it.
//
// The helper runs from this package's init and exits there, before the
// rest of the binary is set up (see package sandbox/injail for why that
// comes first and what it saves): nothing here may import a package
// outside the standard library and golang.org/x/sys.
package inpod

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Arg is the helper's argv[1]; the verb and its flags follow.
const Arg = "sandbox-pod"

func init() {
	if len(os.Args) > 1 && os.Args[1] == Arg {
		os.Exit(Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// Main runs the verb named by args[0] with the rest of args as its flags
// and returns the process's exit code: 0 whenever a status frame was
// written, even for a command that failed, 2 for bad arguments.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: atelier "+Arg+" run|unpack|changes|killall|idle|shell [flags]")
		return 2
	}
	var err error
	switch args[0] {
	case "shell":
		// The shell's own exit code is the helper's: the exec stream
		// carries nothing else back.
		code, err := shellVerb(args[1:], stderr)
		if err != nil {
			fmt.Fprintln(stderr, "atelier sandbox-pod:", err)
			return 2
		}
		return code
	case "run":
		err = runVerb(args[1:], stdin, stdout, stderr)
	case "unpack":
		err = unpackVerb(args[1:], stdin, stdout, stderr)
	case "changes":
		err = changesVerb(args[1:], stdin, stdout, stderr)
	case "killall":
		err = killallVerb(args[1:], stdout, stderr)
	case "idle":
		err = idleVerb(args[1:], stderr)
	default:
		err = fmt.Errorf("%w: unknown verb %q", ErrBadArgs, args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "atelier sandbox-pod:", err)
		return 2
	}
	return 0
}

// Kinds of Entry.
const (
	KindFile     = "file"
	KindDir      = "dir"
	KindLink     = "link"
	KindOther    = "other"    // a FIFO, socket or device: never opened
	KindWhiteout = "whiteout" // a path that is gone
)

// Entry is one path of the workspace, as unpack and changes report it and
// as the server's manifest keeps it. A regular file whose Ino, CtimeNs,
// Size and Mode are unchanged has unchanged content: the kernel sets
// ctime on every change and the user cannot set it back.
type Entry struct {
	Path    string `json:"path"` // slash-separated, relative to the root
	Kind    string `json:"kind"`
	Mode    uint32 `json:"mode"` // permission bits, with setuid, setgid and sticky
	Size    int64  `json:"size"`
	Ino     uint64 `json:"ino"`
	CtimeNs int64  `json:"ctimeNs"`
	MtimeNs int64  `json:"mtimeNs,omitempty"`
	Target  string `json:"target,omitempty"` // a link's
	// TooDeep: a folder at the depth bound, which changes did not enter.
	TooDeep bool `json:"tooDeep,omitempty"`
	// Unreadable: a folder changes could not open, so did not enter.
	Unreadable bool `json:"unreadable,omitempty"`
	// Content: FrameContent frames follow with the file's content, Size
	// bytes in all. Only changes' answers to AskRead carry content.
	Content bool `json:"content"`
}

// What the server writes to changes, one line each, once the helper has
// asked (FrameAsk): AskRead and a number reads the file of that frame of
// the batch (FrameEntry and FrameKnown frames since the last ask, from
// 0), answered by a FrameEntry of the file as it was read, with its
// content when the bounds allow; AskSkip and a quoted path says the
// server passed over that folder, so the walk goes no further below it
// and reports nothing below it gone; AskGoOn lets the walk go on.
const (
	AskRead  = "r "
	AskSkip  = "s "
	AskGoOn  = "c"
	AskBatch = 1024 // frames of entries between asks, at most
	// AskBatchBytes: the helper asks once the batch's paths and link
	// targets reach it, so the server holds a batch of long paths within
	// it and one entry more.
	AskBatchBytes = 1 << 20
)

// RunStatus is run's final frame.
type RunStatus struct {
	Exit            int    `json:"exit"`   // -1 when a signal ended the command
	Signal          string `json:"signal"` // e.g. "killed"
	TimedOut        bool   `json:"timedOut"`
	Overflow        bool   `json:"overflow"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	DurationNs      int64  `json:"durationNs"`
	// Left counts the command's processes still alive when the helper
	// gave up killing them.
	Left  int    `json:"left,omitempty"`
	Error string `json:"error,omitempty"` // the command did not start
}

// KillStatus is killall's final frame.
type KillStatus struct {
	Left int `json:"left"` // processes still alive when it gave up
}

// UnpackStatus is unpack's final frame.
type UnpackStatus struct {
	Entries int    `json:"entries"`
	Error   string `json:"error,omitempty"`
}

// ChangesStatus is changes' final frame.
type ChangesStatus struct {
	Entries  int  `json:"entries"`  // entries reported
	Overflow bool `json:"overflow"` // the walk stopped at -max-entries
	// Skipped counts entries whose names are not UTF-8, which JSON cannot
	// carry: they are neither reported nor entered.
	Skipped int    `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
}

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("inpod: encode %T: %w", v, err)
	}
	return b, nil
}

// cleanRel checks a slash-separated path relative to a root: neither
// absolute nor with a ".." element, and it returns it cleaned; "." for
// the root itself.
func cleanRel(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: %q", ErrBadPath, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: %q", ErrBadPath, p)
		}
	}
	return path.Clean(p), nil
}

// environ is the helper's environment (the container's: the image's PATH,
// the pod's HOME) for a command or a shell, with TERM saying what reads
// the output, as in the local jail: a page's xterm.js for a shell, plain
// text for a command; and LANG C.UTF-8 where the image names none.
func environ(env []string, term string) []string {
	out := make([]string, 0, len(env)+2)
	lang := false
	for _, e := range env {
		switch {
		case strings.HasPrefix(e, "TERM="):
			continue
		case strings.HasPrefix(e, "LANG="):
			lang = true
		}
		out = append(out, e)
	}
	if !lang {
		out = append(out, "LANG=C.UTF-8")
	}
	return append(out, "TERM="+term)
}

// AppendKnown appends the line of changes' known section that stands for
// e, a file the server has met: what the helper compares (inode, ctime,
// size and mode) and its quoted path, far shorter than its Entry in JSON
// and quicker to read, as the section can hold every file of a large tree
// at each capture.
func AppendKnown(b []byte, e Entry) []byte {
	b = strconv.AppendUint(b, e.Ino, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.CtimeNs, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(e.Mode), 10)
	b = append(b, ' ')
	return strconv.AppendQuote(b, e.Path)
}

// ParseKnown reads a line AppendKnown wrote.
func ParseKnown(line string) (Entry, error) {
	e := Entry{Kind: KindFile}
	bad := func() (Entry, error) { return Entry{}, fmt.Errorf("inpod: a known file's line %.60q", line) }
	fields := strings.SplitN(line, " ", 5)
	if len(fields) != 5 {
		return bad()
	}
	ino, err1 := strconv.ParseUint(fields[0], 10, 64)
	ctime, err2 := strconv.ParseInt(fields[1], 10, 64)
	size, err3 := strconv.ParseInt(fields[2], 10, 64)
	mode, err4 := strconv.ParseUint(fields[3], 10, 32)
	name, err5 := strconv.Unquote(fields[4])
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || name == "" {
		return bad()
	}
	e.Ino, e.CtimeNs, e.Size, e.Mode, e.Path = ino, ctime, size, uint32(mode), name
	return e, nil
}

// SectionDigest names a section of changes' input (-manifest-digest,
// -known-digest): the SHA-256, in hex, of its bytes, its ending empty
// line included.
func SectionDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
