// Package fault lets a domain package say, where it declares an error, how a
// person should see it: what kind of failure it is, a stable machine-readable
// reason and a sentence of its own. The handlers map each kind to one HTTP
// status; nothing reads error strings to find out what went wrong.
//
// The package imports nothing of Atelier's, so every domain package can use it.
package fault

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind is what sort of failure an error is. Each kind is answered with
// exactly one HTTP status; the zero value is a failure on the server's side.
type Kind int

const (
	Internal           Kind = iota // the server's own state is wrong (500)
	BadInput                       // the request says something impossible (400)
	Unauthorized                   // nobody, or the wrong person, is signed in (401)
	Forbidden                      // the person may not do this (403)
	NotFound                       // there is no such thing, or the person may not know of it (404)
	Conflict                       // the thing's state does not allow it now (409)
	Gone                           // the thing existed and has ended (410)
	PreconditionFailed             // the thing changed since the person last saw it (412)
	TooLarge                       // the input is larger than allowed (413)
	Unsupported                    // the thing is of a type this does not handle (415)
	Limit                          // a quota or rate is used up; later may work (429)
	Upstream                       // a server Atelier talked to failed (502)
	Unavailable                    // the server cannot do this now or here (503)
	Full                           // the server has no room left for it; later may work (507)
)

// Fault is an error as a person sees it.
type Fault struct {
	Kind    Kind
	Reason  string // machine-readable, stable: clients switch on it
	Message string // one or more sentences, ending in a full stop
	Hint    string // how to fix it, or ""
	// RetryAfter is how long to wait before trying again, for failures
	// that pass (a Limit that frees up); 0 says nothing.
	RetryAfter time.Duration
	// Paths are the paths it is about, when the client needs them to act
	// (a stale_base refusal lists the paths canonical changed).
	Paths []string
}

// Error is an error that knows how a person should see it. Domain errors,
// their wrappings by Detailf, and typed errors such as a refused path
// implement it.
type Error interface {
	error
	Fault() Fault
}

// declared is an error made by New.
type declared struct {
	text  string
	fault Fault
}

func (e *declared) Error() string  { return e.text }
func (e *declared) Fault() Fault   { return e.fault }
func (e *declared) phrase() string { return phraseOf(e.fault.Message) }

// New declares an error. text is what logs and wrappings read, lowercase and
// prefixed with the package's concern ("projects: the project is archived");
// message is what a person reads ("The project is archived."). Errors made by
// New are distinct values, so errors.Is finds them through any wrapping.
func New(kind Kind, reason, text, message string) error {
	return &declared{text: text, fault: Fault{Kind: kind, Reason: reason, Message: message}}
}

// detailed is a declared error with the particulars of one case.
type detailed struct {
	err   error
	fault Fault
}

func (e *detailed) Error() string  { return e.err.Error() }
func (e *detailed) Unwrap() error  { return e.err }
func (e *detailed) Fault() Fault   { return e.fault }
func (e *detailed) phrase() string { return phraseOf(e.fault.Message) }

// Detailf is the declared error base with what exactly was wrong in this
// case. format continues base's text the way fmt.Errorf("%w"+format, base,
// args...) would, and continues base's message the same way, so a person
// reads which path or which source was refused. An argument that is itself an
// Error made here is shown by its message in lower case without the full
// stop, so no package prefix reaches the person. %w verbs wrap as in
// fmt.Errorf: errors.Is finds base and every wrapped argument.
func Detailf(base error, format string, args ...any) error {
	err := fmt.Errorf("%w"+format, append([]any{base}, args...)...)
	var fe Error
	if !errors.As(base, &fe) {
		return err
	}
	shown := make([]any, len(args))
	for i, a := range args {
		shown[i] = a
		if p, ok := a.(interface{ phrase() string }); ok {
			shown[i] = p.phrase()
		}
	}
	f := fe.Fault()
	f.Message = strings.TrimSuffix(f.Message, ".") +
		fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), shown...) + "."
	return &detailed{err: err, fault: f}
}

// WithRetryAfter is err telling the person to try again after the given
// time. errors.Is still finds err in it. An err that describes no fault is
// returned as it is.
func WithRetryAfter(err error, after time.Duration) error {
	var fe Error
	if !errors.As(err, &fe) {
		return err
	}
	f := fe.Fault()
	f.RetryAfter = after
	return &detailed{err: err, fault: f}
}

// phraseOf turns a message into a part of another sentence: no full stop at
// the end and a lower-case first letter.
func phraseOf(message string) string {
	s := strings.TrimSuffix(message, ".")
	if s != "" && s[0] >= 'A' && s[0] <= 'Z' {
		s = string(s[0]-'A'+'a') + s[1:]
	}
	return s
}
