//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// The sandbox needs Linux. Elsewhere the package builds, so that the
// server builds for development, and every call fails.

var errUnsupported = errors.New("sandbox: needs Linux")

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
func MountDisk(string, string, int64) error  { return errUnsupported }
func UnmountDisk(string, string) error       { return errUnsupported }
func CleanDisks(string) error                { return nil }
func ReleaseBelow(string) error              { return nil }
func MountCache(string, string, int64) error { return errUnsupported }
func UnmountCache(string) error              { return nil }
func CleanCaches(string) error               { return nil }
func GiveCache(string, uint32, uint32) error { return errUnsupported }
func TrimCache(string, int64) (int64, error) { return 0, errUnsupported }

// ErrNoLayers: no overlay off Linux.
var ErrNoLayers = errUnsupported

func MountLayers(string, string, string, string) error { return ErrNoLayers }
func UnmountLayers(string) error                       { return nil }
func mountSharedLayers(string, uint32, string, string, string) error {
	return ErrNoLayers
}

// Spare is unavailable off Linux.
type Spare struct{}

func (s *Sandbox) Spare(uid uint32) (*Spare, error) { return nil, errUnsupported }
func (sp *Spare) Close()                            {}
func (sp *Spare) fresh() bool                       { return false }

func WalkTree(string, WalkOptions, func(*TreeEntry) error) error { return errUnsupported }
func RemoveTree(string) error                                    { return errUnsupported }
func (e *TreeEntry) Stat() (unix.Stat_t, error)                  { return unix.Stat_t{}, errUnsupported }
func (e *TreeEntry) Open() (*os.File, error)                     { return nil, errUnsupported }
func (e *TreeEntry) Readlink() (string, error)                   { return "", errUnsupported }
func RemoveTreeAt(int, string) error                             { return errUnsupported }
