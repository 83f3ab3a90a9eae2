package sandbox

import (
	"context"
	"io"
	"time"
)

// Provider is wherever sessions' code runs: Local, the jail on this host,
// or a provider on another machine. A session's workspace is built, run
// in, looked at and ended only through it, and so that a provider
// elsewhere can implement it, nothing crosses it that belongs to this
// host: no open file and no path of the server, only names, bytes and
// streams. Any call may fail with an error of fault.Unavailable
// when the provider cannot be reached; the
// caller then reports it, and the session's edits, kept in the database,
// are untouched.
//
// A session's calls come one at a time (the caller serialises them by
// session), except Start's consoles, which run beside the others, and
// KillAll and End, which may come at any moment.
type Provider interface {
	// Available is nil when the provider runs sessions' code, else why it
	// does not.
	Available() error
	// Prepare makes the session's workspace ready to run in. When the
	// session has none (its first command, after Release, after a
	// restart), one is built from base, and Prepared.Fresh says so: the
	// caller then writes the session's edits into it.
	Prepare(ctx context.Context, s Session, base Base) (Prepared, error)
	// Write puts one file into the prepared workspace, replacing whatever
	// is at its path (never following a link there); Exists false removes
	// the path and everything below it.
	Write(ctx context.Context, s Session, f File) error
	// Run runs a one-shot command in the prepared workspace and returns
	// once every process of it has ended.
	Run(ctx context.Context, s Session, c Command) (*Result, error)
	// Anticipate starts making ready what the next command in the
	// prepared workspace starts with, for a session whose person is about
	// to run one, and returns without waiting for it to be ready; a
	// provider with nothing to make ready does nothing.
	Anticipate(s Session)
	// Start starts an interactive shell on a terminal of cols×rows in the
	// prepared workspace.
	Start(ctx context.Context, s Session, cols, rows int) (Console, error)
	// Changed walks what may have changed in the workspace since it was
	// built: only what was written or deleted when Prepared.Layered, the
	// whole tree otherwise. Nothing of the session may run meanwhile.
	Changed(ctx context.Context, s Session, maxDepth int, visit func(Entry) error) error
	// KillAll ends every process of the session.
	KillAll(ctx context.Context, s Session) error
	// Release takes down the session's workspace when it has been idle;
	// its home stays, and the next Prepare builds the workspace again.
	Release(ctx context.Context, s Session) error
	// End removes everything of the session: processes, workspace, home
	// and disk.
	End(ctx context.Context, s Session) error
	// Leave drops what this instance keeps of a session that another
	// instance may hold by now. A sandbox of this host's is this
	// instance's alone and ends; one that every instance reaches (a
	// pod) is the session's holder's, and stays.
	Leave(ctx context.Context, s Session) error
	// EndProject removes what the provider keeps for a deleted project
	// (its cache).
	EndProject(ctx context.Context, projectID int64) error
	// Recover ends what a previous run of the provider left: the
	// processes and mounts of the sessions still open, and the disks and
	// caches no session holds any more.
	Recover(ctx context.Context, open []Session) error
	// Close takes down everything the provider runs, for a server that
	// stops: the sessions stay open, and their next Prepare builds afresh.
	Close(ctx context.Context) error
}

// SharedByInstances is implemented by a provider whose sandboxes every
// instance reaches (a pod per session): ending "everything of a session"
// there would end what another instance runs for it, so an instance that
// lets its sessions go ends only its own commands.
type SharedByInstances interface {
	SharedByInstances()
}

// Session names one edit session's sandbox, or a Change's check, to its
// provider.
type Session struct {
	// ID names the session's place with the provider; it matches
	// ^[A-Za-z0-9_-]{1,80}$ (an edit session's id, or "check-<n>").
	ID        string
	ProjectID int64
	// UID is unique to the session among those running; its processes run
	// as it (and as its group).
	UID     uint32
	Network Network
	// Cache: the session may take its project's cache, seen at
	// HOME/.cache, when no other session holds it. A check never does.
	Cache bool
}

// Base is the tree a workspace starts from, as a tar stream a provider
// unpacks wherever it runs (gitsvc's archive of a commit).
type Base interface {
	WriteTar(ctx context.Context, w io.Writer) error
	// ID names the tree: bases of one ID write the same stream, so a
	// provider may unpack it once for all the workspaces that start from
	// it (a commit's hash). "" shares it with none.
	ID() string
}

// Prepared says what Prepare found or made.
type Prepared struct {
	// Fresh: the workspace was built from the base just now, and holds
	// nothing of the session's edits yet.
	Fresh bool
	// Layered: Changed meets only what was written or deleted since the
	// build, deletions as KindWhiteout, a replaced folder as Opaque.
	Layered bool
}

// File is a file to write into a workspace.
type File struct {
	Path    string // slash-separated, relative to the workspace
	Content []byte
	Exists  bool
}

// Command is a one-shot command of a session.
type Command struct {
	Argv   []string // e.g. CommandArgv(line)
	Folder string   // where it runs, relative to the workspace; "" is its top
	// Output is given stdout and stderr as they are read (Spec.Output).
	Output io.Writer
	Limits Limits
	// NoneAfter: nothing runs in the workspace after this command (a
	// Change's check), so nothing is made ready for a next one.
	NoneAfter bool
}

// Console is an interactive shell's terminal and the shell itself.
type Console interface {
	// Read returns the shell's output; it fails once no writer is left,
	// at the read deadline, or once the console is closed.
	Read(p []byte) (int, error)
	SetReadDeadline(t time.Time) error
	// Write gives the shell input, waiting for room; TryWrite gives it
	// what it takes now, 0 when it is full or gone.
	Write(p []byte) (int, error)
	TryWrite(p []byte) int
	// Resize sets the window size; an error wrapping os.ErrClosed once
	// the console is closed.
	Resize(cols, rows int) error
	// Wait blocks until the shell ends: its exit code, or the signal
	// that ended it.
	Wait() (ShellExit, error)
	// Kill ends the shell and everything it started, and returns once
	// they are gone.
	Kill() error
	Close() error
}

// ShellExit is how a shell ended.
type ShellExit struct {
	Code   int    // -1 when a signal ended it
	Signal string // e.g. "SIGKILL"; "" for an exit
}

// Entry is one path of a workspace that Changed meets.
type Entry struct {
	Path    string // slash-separated, relative to the workspace
	Kind    EntryKind
	Opaque  bool // a folder that hides the base's folder of that name
	TooDeep bool // a folder at the depth bound: not entered
	// Look reads the entry; it works only during the visit.
	Look Looker
}

// Looker reads one entry of a walk, never following a link and never
// waiting on a pipe: whoever wrote the workspace may have swapped it.
type Looker interface {
	Stat() (FileStat, error)
	// ReadFile reads up to len(buf) bytes of a regular file into buf,
	// with the file's metadata as it was read.
	ReadFile(buf []byte) (int, FileStat, error)
	Readlink() (string, error)
}

// FileStat is what a capture knows of a file. Each field but Regular
// changes whenever the content may have: the session's user sets mtime at
// will, but every write and every change of mtime sets ctime to the clock
// of the workspace's host, and the inode tells a file put in the place of
// another apart.
type FileStat struct {
	Regular              bool
	Dev, Ino             uint64
	Size                 int64
	Mode                 uint32
	MtimeNsec, CtimeNsec int64
}
