package sandbox

import "io"

// OutputCapture keeps a command's output within its Limits as the local
// runner does, for a provider whose command runs elsewhere and whose
// output arrives in chunks: the same tails, truncation and overflow.
type OutputCapture struct{ c *capture }

// NewOutputCapture captures within lim (its defaults filled); every chunk
// also goes to live when it is not nil.
func NewOutputCapture(lim Limits, live io.Writer) *OutputCapture {
	return &OutputCapture{c: newCapture(lim.WithDefaults(), live)}
}

// Stdout and Stderr take the next chunk of each stream.
func (o *OutputCapture) Stdout(p []byte) { o.c.write(&o.c.out, p) }
func (o *OutputCapture) Stderr(p []byte) { o.c.write(&o.c.err, p) }

// Overflowed reports whether a limit was passed without Limits.Tail: the
// command must then be ended.
func (o *OutputCapture) Overflowed() bool { return o.c.didOverflow() }

// Fill puts what was kept into r.
func (o *OutputCapture) Fill(r *Result) { o.c.fill(r) }
