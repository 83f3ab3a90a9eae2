package editsession

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/sandbox"
	"atelier/storage/codestore"
	"atelier/terminal"
	"atelier/workspace"
)

// ErrNoSandbox is a session opened before sessions had a uid of their own.
var ErrNoSandbox = fault.New(fault.Conflict, "no_sandbox", "editsession: this session has no sandbox user; discard it and open a new one", "This session has no sandbox user; discard it and open a new one.")

// DefaultDiskBytes is the usual bound of a session's disk.
const DefaultDiskBytes = 2 << 30

// Sandboxes is what a session's runtime needs: the sandbox itself, its
// meter, where Local projects' checkouts go and the block of uids.
type Sandboxes struct {
	Box       *sandbox.Sandbox
	Meter     *meter.Meter
	LocalArea string // <data>/sandboxes: Local projects' execution areas
	UIDBase   uint32
	UIDCount  uint32 // sessions' uids are UIDBase + [0, UIDCount)
	Instance  string // this server process, for the meter's reservations
	// MaxRunning bounds the commands this instance runs (or holds waiting
	// for their session's earlier command) at once; 0 means no bound.
	MaxRunning int
	// DiskBytes bounds each session's disk: its checkout, tmp and home
	// live on a file system image of this size (sandbox.MountDisk), kept in
	// DiskArea. 0 leaves them on the host's file system, unbounded.
	DiskBytes int64
	DiskArea  string
	// Observer is told of every command that ran to its end; nil: nobody.
	Observer CommandObserver
	// Hint tells open admin dashboards what changed (events.Recorder.Hint);
	// nil tells nobody.
	Hint func(topic string)
}

// CommandObserver hears of commands as they end, so monitoring can count
// them without this package knowing how it does.
type CommandObserver interface {
	// CommandRan is called once per command that ran to its end (a
	// timeout included), with its exit code and how long it ran.
	CommandRan(exitCode int, took time.Duration)
}

// Runtime is what runs for sessions on this host: each session's checkout,
// the commands run in it, and the capture of what they changed into edits.
type Runtime struct {
	db        *models.Store
	git       *gitsvc.Service
	code      *codestore.Store
	ws        *workspace.Workspaces
	sb        Sandboxes
	terms     *terminal.Manager // whether a session's shells still run
	now       func() time.Time
	log       *slog.Logger
	checkouts *checkouts
	running   chan struct{} // a slot per running command; nil: no bound
	admitted  atomic.Int64  // commands running or waiting for their session's earlier one
	commands  runningCommands
	// checkMu serialises checks on this instance: they share one sandbox
	// user, the last of the block, which sessions never draw.
	checkMu sync.Mutex
}

// NewRuntime returns the runtime of sessions on this host.
func NewRuntime(db *models.Store, git *gitsvc.Service, code *codestore.Store, ws *workspace.Workspaces,
	sb Sandboxes, terms *terminal.Manager, now func() time.Time, log *slog.Logger) *Runtime {
	r := &Runtime{db: db, git: git, code: code, ws: ws, sb: sb, terms: terms, now: now, log: log, checkouts: newCheckouts()}
	if sb.MaxRunning > 0 {
		r.running = make(chan struct{}, sb.MaxRunning)
	}
	return r
}

// uid is the session's sandbox user, the one place it is derived.
func (r *Runtime) uid(cs *models.CodeSession) (uint32, error) {
	if cs.SandboxSlot == nil {
		return 0, ErrNoSandbox
	}
	return r.sb.UIDBase + uint32(*cs.SandboxSlot), nil
}

// paths are the session's checkout, home and /tmp folders on this host, the one
// place they are derived: in the session's folder (sessionFolder), which
// holds everything of the session and is the mount point of its disk.
func (r *Runtime) paths(p *models.Project, sessionID string) (dir, home, tmp string, err error) {
	top, err := r.sessionFolder(p, sessionID)
	if err != nil {
		return "", "", "", err
	}
	return filepath.Join(top, "checkout"), filepath.Join(top, "home"), filepath.Join(top, "tmp"), nil
}

// sessionFolder is the folder of the session's own folders, in the
// project's execution area: under its root for a Container project and
// under the data dir for a Local one (whose folder is the person's own).
func (r *Runtime) sessionFolder(p *models.Project, sessionID string) (string, error) {
	var area string
	var err error
	if p.WorkspaceMode == models.ModeLocal {
		area = filepath.Join(r.sb.LocalArea, p.WorkspaceDirName)
		if err := os.MkdirAll(area, 0o700); err != nil {
			return "", err
		}
	} else if area, err = r.ws.ScopeRoot(projects.Location(p)); err != nil {
		return "", err
	}
	return filepath.Join(area, "session-"+strings.TrimPrefix(sessionID, "edit_")), nil
}

// diskImage is the file holding the session's disk.
func (r *Runtime) diskImage(sessionID string) string {
	return filepath.Join(r.sb.DiskArea, strings.TrimPrefix(sessionID, "edit_")+".img")
}

// openSessionFolder makes the session's folder, root's and passable by
// the session's user, on a disk of its own when disks are bounded.
func (r *Runtime) openSessionFolder(top, sessionID string) error {
	if r.sb.DiskBytes <= 0 {
		if err := os.Mkdir(top, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("editsession: session folder: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(r.sb.DiskArea, 0o700); err != nil {
		return fmt.Errorf("editsession: session disk: %w", err)
	}
	return sandbox.MountDisk(r.diskImage(sessionID), top, r.sb.DiskBytes)
}

// removeSessionFolder removes the session's folder and its disk. Nothing
// of the session may run.
func (r *Runtime) removeSessionFolder(top, sessionID string) error {
	if err := sandbox.UnmountLayers(filepath.Join(top, "checkout")); err != nil {
		return err
	}
	if r.sb.DiskBytes > 0 {
		if err := sandbox.UnmountDisk(r.diskImage(sessionID), top); err != nil {
			return err
		}
	}
	return os.RemoveAll(top)
}

// checkoutFor returns the session's checkout, built from the fork and the
// edits when it is missing, else brought up to date with the edits. The
// caller holds the session's checkout lock.
func (r *Runtime) checkoutFor(ctx context.Context, sess *Session, uid uint32) (*checkout, error) {
	dir, home, tmp, err := r.paths(sess.Project, sess.ID)
	if err != nil {
		return nil, err
	}
	r.checkouts.mu.Lock()
	co, ok := r.checkouts.live[sess.ID]
	r.checkouts.mu.Unlock()
	if ok {
		if _, err := os.Lstat(co.dir); err == nil {
			return co, r.sync(ctx, sess, co)
		}
		co.dropSpares()
	}
	top := filepath.Dir(dir)
	co = &checkout{dir: dir, home: home, tmp: tmp, uid: uid, gid: uid,
		lower: filepath.Join(top, "lower"), upper: filepath.Join(top, "upper"), work: filepath.Join(top, "work")}
	if err := r.openSessionFolder(filepath.Dir(dir), sess.ID); err != nil {
		return nil, err
	}
	for _, d := range []string{co.home, co.tmp} {
		if err := sandbox.PrepareDir(d, uid, uid); err != nil {
			return nil, err
		}
	}
	if err := r.build(ctx, sess, co); err != nil {
		return nil, err
	}
	r.checkouts.mu.Lock()
	r.checkouts.live[sess.ID] = co
	r.checkouts.mu.Unlock()
	return co, nil
}

// inSessionTag is a terminal's tag that names the session it works in; the
// checkout stays while one runs.
type inSessionTag interface{ session() string }

// hasShells reports whether a terminal of the session still runs here.
func (r *Runtime) hasShells(sessionID string) bool {
	for _, t := range r.terms.Running() {
		if tag, ok := t.Tag().(inSessionTag); ok && tag.session() == sessionID {
			return true
		}
	}
	return false
}

// captureAfterShells turns what the session's shells changed into edits
// once the last of them has ended, as after a command: nothing of the
// session may run while its files are read, so it waits for that moment.
func (r *Runtime) captureAfterShells(ctx context.Context, sessionID string) error {
	unlock := r.checkouts.lock(sessionID)
	defer unlock()
	if r.hasShells(sessionID) {
		return nil
	}
	r.checkouts.mu.Lock()
	co := r.checkouts.live[sessionID]
	r.checkouts.mu.Unlock()
	if co == nil {
		return nil
	}
	sess, err := loadOpen(ctx, r.db, r.git, sessionID)
	if errors.Is(err, ErrNotFound) || errors.As(err, new(*GoneError)) {
		return nil // ended meanwhile: its edits are gone anyway
	}
	if err != nil {
		return err
	}
	if err := r.sb.Box.KillAll(ctx, co.uid); err != nil {
		return err
	}
	_, err = r.capture(ctx, sess, co)
	return err
}

// DropIdleCheckouts removes checkouts unused for two minutes that no shell
// works in; the next command rebuilds them from the fork and the edits.
// Run calls it.
func (r *Runtime) DropIdleCheckouts(ctx context.Context) {
	now := r.now()
	r.checkouts.mu.Lock()
	var idle []string
	for id, co := range r.checkouts.live {
		if now.Sub(co.lastUsed) >= checkoutIdle {
			idle = append(idle, id)
		}
	}
	r.checkouts.mu.Unlock()
	for _, id := range idle {
		unlock := r.checkouts.lock(id)
		busy := r.hasShells(id)
		r.checkouts.mu.Lock()
		co := r.checkouts.live[id]
		if co != nil && !busy && r.now().Sub(co.lastUsed) >= checkoutIdle {
			delete(r.checkouts.live, id)
		} else {
			co = nil
		}
		r.checkouts.mu.Unlock()
		if co != nil {
			if err := co.remove(); err != nil {
				r.log.Warn("idle checkout not removed", "session", id, "err", err)
			}
		}
		unlock()
	}
}

// EndSession ends the session's sandbox when the session ends: every
// process of its user, then its folder with its checkout and home, and its
// disk. Sessions call it.
func (r *Runtime) EndSession(ctx context.Context, cs *models.CodeSession) error {
	uid, err := r.uid(cs)
	if errors.Is(err, ErrNoSandbox) {
		return nil
	}
	unlock := r.checkouts.lock(cs.ID)
	defer unlock()
	if err := r.sb.Box.KillAll(ctx, uid); err != nil {
		return err
	}
	p, err := r.db.ProjectByID(ctx, cs.ProjectID)
	if err != nil {
		return err
	}
	top, err := r.sessionFolder(p, cs.ID)
	if err != nil {
		return err
	}
	r.checkouts.mu.Lock()
	if co := r.checkouts.live[cs.ID]; co != nil {
		co.dropSpares()
	}
	delete(r.checkouts.live, cs.ID)
	r.checkouts.mu.Unlock()
	return r.removeSessionFolder(top, cs.ID)
}

// KillLeftovers kills whatever processes the users of unfinished sessions
// still have, such as a command that outlived a crashed server, then
// unmounts and removes the session disks a previous run left: the next
// command of a session builds its checkout on a fresh one.
func (r *Runtime) KillLeftovers(ctx context.Context) error {
	css, err := r.db.UnfinishedSessions(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range css {
		if uid, err := r.uid(&css[i]); err == nil {
			errs = append(errs, r.sb.Box.KillAll(ctx, uid))
		}
	}
	if r.sb.DiskArea != "" {
		errs = append(errs, sandbox.CleanDisks(r.sb.DiskArea))
	}
	return errors.Join(errs...)
}

// Run drops idle checkouts until ctx ends.
func (r *Runtime) Run(ctx context.Context) {
	t := time.NewTicker(checkoutIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.DropIdleCheckouts(ctx)
		}
	}
}
