package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"atelier/internal/txwatch"
	"atelier/terminal/hostpty"
)

// The usual bounds of a session's disk and of a project's cache.
const (
	DefaultDiskBytes  = 2 << 30
	DefaultCacheBytes = 2 << 30
)

// LocalConfig is the set-up of the Local provider.
type LocalConfig struct {
	Box *Sandbox
	// Area holds each session's folder (its checkout, home and /tmp, and
	// the mount point of its disk), on this host's own file system:
	// overlays do not take a network file system as their upper layer.
	Area string
	// DiskBytes bounds each session's disk: its folder lives on a file
	// system image of this size (MountDisk), kept in DiskArea. 0 leaves
	// it on the host's file system, unbounded.
	DiskBytes int64
	DiskArea  string
	// CacheBytes bounds each project's cache, a disk of its own kept in
	// CacheArea (local_cache.go); 0: no project has one, and each
	// session's HOME/.cache is its own. CacheTotal bounds all projects'
	// caches together (roomForCache); 0: no bound.
	CacheBytes int64
	CacheArea  string
	CacheTotal int64
	// BaseArea holds the trees of bases shared by the workspaces that
	// start from them (sharedBases), on this host's own file system; ""
	// is Area's "bases" sibling.
	BaseArea string
	Log      *slog.Logger
}

// Local is the Provider of this host: each session's workspace is an
// overlay of the base, as unpacked, and what the session wrote, in the
// session's folder under LocalConfig.Area, and its code runs in the jail
// (Sandbox).
type Local struct {
	cfg    LocalConfig
	box    *Sandbox
	log    *slog.Logger
	mu     sync.Mutex
	live   map[string]*localWorkspace // by Session.ID
	bases  *sharedBases
	caches caches
}

var _ Provider = (*Local)(nil)

// NewLocal returns the provider of this host.
func NewLocal(cfg LocalConfig) *Local {
	if cfg.BaseArea == "" {
		cfg.BaseArea = filepath.Join(filepath.Dir(cfg.Area), "bases")
	}
	return &Local{cfg: cfg, box: cfg.Box, log: cfg.Log, live: map[string]*localWorkspace{},
		bases: newSharedBases(cfg.BaseArea, cfg.Log)}
}

// sessionName is what Session.ID may be: it names a folder and a file.
var sessionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// folder is the session's folder, the one place it is derived.
func (l *Local) folder(s Session) (string, error) {
	if !sessionName.MatchString(s.ID) {
		return "", fmt.Errorf("%w: session %q", ErrBadSpec, s.ID)
	}
	return filepath.Join(l.cfg.Area, s.ID), nil
}

// diskImage is the file holding the session's disk.
func (l *Local) diskImage(s Session) string {
	return filepath.Join(l.cfg.DiskArea, s.ID+".img")
}

// Available is nil when the jail can be built on this host.
func (l *Local) Available() error { return l.box.Unavailable() }

// workspace is the session's prepared workspace, or an error saying
// Prepare must come first.
func (l *Local) workspace(s Session) (*localWorkspace, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ws := l.live[s.ID]; ws != nil && ws.uid == s.UID {
		return ws, nil
	}
	return nil, fmt.Errorf("%w: session %s has no prepared workspace", ErrBadSpec, s.ID)
}

// Prepare builds the session's workspace when it has none: its folder,
// on a disk of its own when disks are bounded; HOME and /tmp, the
// session's user's; the base unpacked and handed to that user as the
// overlay's lower layer; and the project's cache when the session may
// take it.
func (l *Local) Prepare(ctx context.Context, s Session, base Base) (Prepared, error) {
	top, err := l.folder(s)
	if err != nil {
		return Prepared{}, err
	}
	l.mu.Lock()
	ws := l.live[s.ID]
	l.mu.Unlock()
	if ws != nil {
		if _, err := os.Lstat(ws.dir); err == nil {
			return Prepared{Layered: ws.layered}, nil
		}
		ws.dropSpares()
	}
	ws = newLocalWorkspace(top, s, l.bases)
	if err := l.openFolder(s, top); err != nil {
		return Prepared{}, err
	}
	for _, d := range []string{ws.home, ws.tmp} {
		if err := PrepareDir(d, s.UID, s.UID); err != nil {
			return Prepared{}, err
		}
	}
	if err := makeHomeCache(ws.home, s.UID); err != nil {
		return Prepared{}, err
	}
	if err := ws.build(ctx, base); err != nil {
		return Prepared{}, err
	}
	// Before the spares start: they see the mounts made until then.
	if s.Cache {
		ws.cache = l.takeCache(s)
	}
	l.mu.Lock()
	l.live[s.ID] = ws
	l.mu.Unlock()
	return Prepared{Fresh: true, Layered: ws.layered}, nil
}

// openFolder makes the session's folder, root's and passable by the
// session's user, on a disk of its own when disks are bounded.
func (l *Local) openFolder(s Session, top string) error {
	if err := os.MkdirAll(l.cfg.Area, 0o700); err != nil {
		return fmt.Errorf("sandbox: session folders: %w", err)
	}
	if l.cfg.DiskBytes <= 0 {
		if err := os.Mkdir(top, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("sandbox: session folder: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(l.cfg.DiskArea, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrDisk, err)
	}
	return MountDisk(l.diskImage(s), top, l.cfg.DiskBytes)
}

// removeFolder removes the session's folder and its disk. Nothing of the
// session may run.
func (l *Local) removeFolder(s Session, top string) error {
	if err := UnmountLayers(filepath.Join(top, "checkout")); err != nil {
		return err
	}
	if l.cfg.DiskBytes > 0 {
		if err := UnmountDisk(l.diskImage(s), top); err != nil {
			return err
		}
	}
	return RemoveTree(top)
}

// Write replaces f.Path in the session's workspace.
func (l *Local) Write(_ context.Context, s Session, f File) error {
	ws, err := l.workspace(s)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(ws.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := replaceFile(root, f.Path, f.Content, f.Exists, ws.uid, ws.uid); err != nil {
		return fmt.Errorf("sandbox: write %s: %w", f.Path, err)
	}
	return nil
}

// Run runs c in the jail as the session's user. A helper started ahead
// runs it when one waits, and the next commands' start up while it runs.
func (l *Local) Run(ctx context.Context, s Session, c Command) (*Result, error) {
	ws, err := l.workspace(s)
	if err != nil {
		return nil, err
	}
	dir := ws.dir
	if c.Folder != "" {
		dir = filepath.Join(ws.dir, filepath.FromSlash(c.Folder))
	}
	spec := Spec{
		UID: s.UID, GID: s.UID, Workspace: ws.dir, Dir: dir, Home: ws.home, Tmp: ws.tmp, Cache: ws.cache,
		Argv: c.Argv, Network: s.Network, Output: c.Output,
	}
	if !c.NoneAfter {
		next := func() { ws.prepareSpares(l.box, s.UID, sparesAhead, l.log) }
		if spec.Spare = ws.takeSpare(); spec.Spare != nil {
			next()
		} else {
			// Only once this command's own helper is up: helpers that
			// start together slow each other down, even at the spares'
			// low priority (a lone helper was ready in 90 ms, one
			// started beside three spares in 250 ms, on a 2-core host).
			spec.Started = next
		}
	}
	return l.box.Run(ctx, spec, c.Limits)
}

// Anticipate starts a helper for the session's next command when none
// waits, so that a command run soon after finds it ready; it returns once
// the helper is started, for a command to take, not once it is ready.
func (l *Local) Anticipate(s Session) {
	if ws, err := l.workspace(s); err == nil {
		ws.prepareSpares(l.box, s.UID, 1, l.log)()
	}
}

// Start starts ShellArgv on a PTY of this host whose slave the jail makes
// the shell's terminal.
func (l *Local) Start(ctx context.Context, s Session, cols, rows int) (Console, error) {
	txwatch.Slow(ctx, "sandbox start")
	ws, err := l.workspace(s)
	if err != nil {
		return nil, err
	}
	master, tty, err := hostpty.Open(cols, rows, int(s.UID), int(s.UID))
	if err != nil {
		return nil, err
	}
	defer tty.Close()
	p, err := l.box.Start(Spec{
		UID: s.UID, GID: s.UID, Workspace: ws.dir, Dir: ws.dir, Home: ws.home, Tmp: ws.tmp, Cache: ws.cache,
		Argv: ShellArgv(), Network: s.Network, TTY: tty,
	})
	if err != nil {
		master.Close()
		return nil, err
	}
	return &localConsole{Master: master, p: p, waited: make(chan struct{})}, nil
}

// Changed walks the overlay's upper layer, or the whole checkout where
// the host has no overlay.
func (l *Local) Changed(ctx context.Context, s Session, maxDepth int, visit func(Entry) error) error {
	ws, err := l.workspace(s)
	if err != nil {
		return err
	}
	walked := ws.dir
	if ws.layered {
		walked = ws.upper
	}
	return WalkTree(walked, WalkOptions{MaxDepth: maxDepth, Upper: ws.layered}, func(e *TreeEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return visit(Entry{Path: e.Path, Kind: e.Kind, Opaque: e.Opaque, TooDeep: e.TooDeep, Look: treeLook{e}})
	})
}

// KillAll ends every process of the session's user.
func (l *Local) KillAll(ctx context.Context, s Session) error { return l.box.KillAll(ctx, s.UID) }

// Release removes the session's checkout and the helpers waiting for its
// next commands; its folder, home and disk stay.
func (l *Local) Release(_ context.Context, s Session) error {
	l.mu.Lock()
	ws := l.live[s.ID]
	delete(l.live, s.ID)
	l.mu.Unlock()
	if ws == nil {
		return nil
	}
	return ws.remove()
}

// Leave is End: what this host holds of a session is this instance's
// alone.
func (l *Local) Leave(ctx context.Context, s Session) error { return l.End(ctx, s) }

// End kills the session's processes and removes its folder with its
// checkout and home, and its disk; the project's cache is free for the
// next session.
func (l *Local) End(ctx context.Context, s Session) error {
	top, err := l.folder(s)
	if err != nil {
		return err
	}
	if err := l.box.KillAll(ctx, s.UID); err != nil {
		return err
	}
	l.mu.Lock()
	ws := l.live[s.ID]
	if ws != nil {
		ws.dropSpares()
	}
	delete(l.live, s.ID)
	l.mu.Unlock()
	l.releaseCache(s)
	if err := l.removeFolder(s, top); err != nil {
		return err // a shared tree under it stays until the next start
	}
	if ws != nil {
		ws.releaseShared()
	}
	return nil
}

// EndProject removes a deleted project's cache.
func (l *Local) EndProject(_ context.Context, projectID int64) error { return l.removeCache(projectID) }

// Recover kills whatever processes the users of open sessions still have,
// such as a command that outlived a crashed server, unmounts the overlays
// it left, then unmounts and removes every session disk and cache mount a
// previous run left: the next command of a session builds its checkout on
// a fresh disk.
func (l *Local) Recover(ctx context.Context, open []Session) error {
	var errs []error
	for _, s := range open {
		errs = append(errs, l.box.KillAll(ctx, s.UID))
		if top, err := l.folder(s); err != nil {
			errs = append(errs, err)
		} else {
			errs = append(errs, UnmountLayers(filepath.Join(top, "checkout")))
		}
	}
	// The overlays are down: no workspace is on a shared tree.
	errs = append(errs, l.bases.clean())
	if l.cfg.DiskArea != "" {
		errs = append(errs, CleanDisks(l.cfg.DiskArea))
	}
	if l.cfg.CacheArea != "" {
		errs = append(errs, CleanCaches(l.cfg.CacheArea))
	}
	return errors.Join(errs...)
}

// Close takes down what this host runs for sessions, for a server that
// stops: every process of the sessions' users, the helpers waiting for
// their next commands, each checkout's overlay and layers, and each
// session's disk, unmounted with its image removed, as the next start
// would otherwise do; the caches are unmounted, their images kept.
// Without disks, HOME and /tmp stay on the host's file system, as they do
// across a crash. The caller makes sure nothing else of the sessions runs
// meanwhile.
func (l *Local) Close(ctx context.Context) error {
	l.mu.Lock()
	live := maps.Clone(l.live)
	clear(l.live)
	l.mu.Unlock()
	var errs []error
	for id, ws := range live {
		if err := l.takeDown(ctx, ws); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: session %s: %w", id, err))
		}
	}
	// Kept for the next start; its sessions take them again.
	errs = append(errs, l.unmountCaches())
	return errors.Join(errs...)
}

// takeDown ends the workspace's processes and helpers and unmounts its
// overlay and the session's disk.
func (l *Local) takeDown(ctx context.Context, ws *localWorkspace) error {
	if err := l.box.KillAll(ctx, ws.uid); err != nil {
		return err
	}
	// A helper being started for a next command holds a copy of the
	// session's mounts, which would keep its disk attached: wait for the
	// starts to end; each then finds the checkout gone and ends its helper.
	for {
		ws.dropSpares()
		ws.spareMu.Lock()
		starting := ws.starting
		ws.spareMu.Unlock()
		if starting == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox: helpers still starting: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := ws.remove(); err != nil {
		return err
	}
	if l.cfg.DiskBytes <= 0 {
		return nil
	}
	return UnmountDisk(l.diskImage(ws.session), ws.top)
}

// treeLook reads a walked entry of this host through the descriptor of
// its folder.
type treeLook struct{ e *TreeEntry }

func (t treeLook) Stat() (FileStat, error) {
	st, err := t.e.Stat()
	if err != nil {
		return FileStat{}, err
	}
	return fileStatOf(&st), nil
}

func (t treeLook) Readlink() (string, error) { return t.e.Readlink() }

// ReadFile reads a regular file smaller than buf; a larger one, or
// anything else, is not read, and its stat says why.
func (t treeLook) ReadFile(buf []byte) (int, FileStat, error) {
	f, err := t.e.Open()
	if err != nil {
		return 0, FileStat{}, err
	}
	defer f.Close()
	st, err := statFile(f)
	if err != nil || !st.Regular || st.Size >= int64(len(buf)) {
		return 0, st, err
	}
	n, err := io.ReadFull(f, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return n, st, err
}

// localConsole is a shell in the jail on a PTY of this host.
type localConsole struct {
	*hostpty.Master
	p      *Process
	waited chan struct{}
}

// Pid is the process id of the shell's init helper, PID 1 of its
// namespace, for what looks at this host's processes.
func (c *localConsole) Pid() int { return c.p.Pid() }

// Wait waits for the shell's init helper, which goes with everything in
// the shell's namespace.
func (c *localConsole) Wait() (ShellExit, error) {
	defer close(c.waited)
	err := c.p.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ShellExit{Code: -1, Signal: unix.SignalName(ws.Signal())}, nil
		}
		return ShellExit{Code: ee.ExitCode()}, nil
	}
	if err != nil {
		return ShellExit{Code: -1}, err
	}
	return ShellExit{}, nil
}

// Kill sends SIGKILL to the shell's init helper, PID 1 of its namespace:
// the kernel ends every process in it before the helper's exit, which
// Wait (called by whoever drives the console) reports.
func (c *localConsole) Kill() error {
	if err := unix.Kill(c.p.Pid(), unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	select {
	case <-c.waited:
		return nil
	case <-time.After(consoleKillWait):
		return fmt.Errorf("%w: the shell's helper outlived SIGKILL for %s", ErrProcessesLeft, consoleKillWait)
	}
}

// consoleKillWait bounds how long a console's Kill waits for the shell
// to go.
const consoleKillWait = 5 * time.Second
