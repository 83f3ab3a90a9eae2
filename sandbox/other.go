//go:build !linux

package sandbox

import (
	"context"
	"errors"
)

// The sandbox needs Linux. Elsewhere the package builds, so that the
// server builds for development, and every call fails.

var errUnsupported = errors.New("sandbox: needs Linux")

// Init does nothing off Linux.
func Init() {}

// Sandbox is unavailable off Linux.
type Sandbox struct{}

// Process is unavailable off Linux.
type Process struct{}

func New(Config) (*Sandbox, error) { return nil, errUnsupported }

func (s *Sandbox) Run(context.Context, Spec, Limits) (*Result, error) {
	return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: errUnsupported}
}

func (s *Sandbox) Start(Spec) (*Process, error)          { return nil, errUnsupported }
func (s *Sandbox) KillAll(context.Context, uint32) error { return errUnsupported }
func (s *Sandbox) CgroupMode() string                    { return "" }
func (s *Sandbox) Has(string) bool                       { return false }
func (s *Sandbox) Unavailable() error                    { return errUnsupported }
func (s *Sandbox) Close() error                          { return nil }
func (p *Process) Pid() int                              { return 0 }
func (p *Process) Wait() error                           { return errUnsupported }
func PrepareDir(string, uint32, uint32) error            { return errUnsupported }
func RunPlain(context.Context, []string, string, []string, Limits) (*Result, error) {
	return nil, &RunError{Kind: Start, Partial: Result{ExitCode: -1}, Err: errUnsupported}
}
func MountDisk(string, string, int64) error { return errUnsupported }
func UnmountDisk(string, string) error      { return errUnsupported }
func CleanDisks(string) error               { return nil }

// ErrNoLayers: no overlay off Linux.
var ErrNoLayers = errUnsupported

// UpperEntry is a path of an overlay's upper folder.
type UpperEntry struct {
	Path                  string
	Dir, Opaque, Whiteout bool
}

func MountLayers(string, string, string, string) error { return ErrNoLayers }
func UnmountLayers(string) error                       { return nil }
func ReadUpper(string) ([]UpperEntry, error)           { return nil, errUnsupported }

// Spare is unavailable off Linux.
type Spare struct{}

func (s *Sandbox) Spare(uid uint32) (*Spare, error) { return nil, errUnsupported }
func (sp *Spare) Close()                            {}
