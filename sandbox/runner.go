package sandbox

import (
	"errors"
	"time"
)

// Defaults of Limits.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultMaxStream = 1 << 20
)

// Limits bound one command. The zero value means a 10 s timeout and 1 MiB
// per stream, failing beyond either.
type Limits struct {
	Timeout     time.Duration // default 10 s
	MaxStream   int64         // per stream; default 1 MiB unless MaxCombined is set
	MaxCombined int64         // stdout and stderr together; 0 = no combined limit
	// Tail keeps the last MaxStream bytes of each stream and lets the
	// command carry on (setting the truncated flags) instead of failing.
	Tail bool
	// TimeoutExit > 0 turns a timeout into a Result with this exit code
	// (people's commands use 124, as timeout(1) does) instead of an error.
	TimeoutExit int
}

// WithDefaults fills what l leaves unset.
func (l Limits) WithDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MaxStream <= 0 {
		l.MaxStream = DefaultMaxStream
		if l.MaxCombined > 0 {
			// A combined limit given alone replaces the per-stream one;
			// no stream can hold more than the combined limit anyway.
			l.MaxStream = l.MaxCombined
		}
	}
	if l.MaxCombined < 0 {
		l.MaxCombined = 0
	}
	return l
}

// Result is a command that ran to its end. A non-zero exit is a Result,
// not an error.
type Result struct {
	ExitCode        int    // -1 when a signal ended the command
	Signal          string // "" or the signal that ended it, e.g. "killed"
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
	// TimedOut is set only with Limits.TimeoutExit: ExitCode is then that
	// code, and Signal says how the command was ended.
	TimedOut bool
}

// ErrKind says why a command did not produce a Result.
type ErrKind int

// The kinds of RunError.
const (
	Timeout  ErrKind = iota + 1 // Limits.Timeout passed
	Canceled                    // the context ended (its Err is in RunError.Err)
	Overflow                    // output passed a limit without Limits.Tail
	Cleanup                     // processes of the command could not all be ended
	Start                       // the command did not start
)

// Sentinels that errors.Is matches against a *RunError of that kind.
var (
	ErrTimeout  = errors.New("sandbox: command timed out")
	ErrCanceled = errors.New("sandbox: command canceled")
	ErrOverflow = errors.New("sandbox: command output over the limit")
	ErrCleanup  = errors.New("sandbox: command's processes not ended")
	ErrStart    = errors.New("sandbox: command not started")
)

func (k ErrKind) sentinel() error {
	switch k {
	case Timeout:
		return ErrTimeout
	case Canceled:
		return ErrCanceled
	case Overflow:
		return ErrOverflow
	case Cleanup:
		return ErrCleanup
	case Start:
		return ErrStart
	}
	return nil
}

func (k ErrKind) String() string {
	switch k {
	case Timeout:
		return "timeout"
	case Canceled:
		return "canceled"
	case Overflow:
		return "overflow"
	case Cleanup:
		return "cleanup"
	case Start:
		return "start"
	}
	return "unknown"
}

// RunError is a command that did not complete: it timed out, was canceled,
// wrote too much, did not start, or left processes that could not be
// ended. Partial holds what it wrote until then. Partial.ExitCode is the
// real status of the main process when it had one (usually -1 with the
// signal that ended it); an exit code is never made up.
type RunError struct {
	Kind    ErrKind
	Partial Result
	Err     error
}

func (e *RunError) Error() string {
	msg := "sandbox: command failed"
	if s := e.Kind.sentinel(); s != nil {
		msg = s.Error()
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *RunError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTimeout) and its siblings true for the kind.
func (e *RunError) Is(target error) bool {
	s := e.Kind.sentinel()
	return s != nil && target == s
}
