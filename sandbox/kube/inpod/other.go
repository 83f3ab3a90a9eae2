//go:build !linux

package inpod

import (
	"errors"
	"io"
)

// The helper runs only in Linux pods; elsewhere the package is here for
// its frames, which the server reads.
var errNotLinux = errors.New("inpod: the helper runs only on Linux")

func runVerb([]string, io.Reader, io.Writer, io.Writer) error     { return errNotLinux }
func unpackVerb([]string, io.Reader, io.Writer, io.Writer) error  { return errNotLinux }
func changesVerb([]string, io.Reader, io.Writer, io.Writer) error { return errNotLinux }
func killallVerb([]string, io.Writer, io.Writer) error            { return errNotLinux }
func idleVerb([]string, io.Writer) error                          { return errNotLinux }
func shellVerb([]string, io.Writer) (int, error)                  { return 0, errNotLinux }
