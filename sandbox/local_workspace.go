package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
)

// localWorkspace is a session's workspace on this host: the base as
// unpacked (lower, or a tree shared with the other workspaces of its
// base), what was written or deleted since (upper), the overlay of the two
// where commands run (dir), and the session's home and /tmp, all in the
// session's folder (top).
type localWorkspace struct {
	session             Session
	uid                 uint32
	top, dir, home, tmp string
	lower, upper, work  string
	layered             bool // dir is an overlay; without one on this host, a plain folder
	bases               *sharedBases
	sharedMu            sync.Mutex // End may take a workspace down while it is being used
	shared              *baseTree  // the tree under the overlay, when shared; lower is then unused
	cache               string
	spareMu             sync.Mutex
	spares              []*Spare // started ahead for the next commands, oldest first
	starting            int      // spares being started
	generation          int      // moves on when the mounts change: older spares saw old ones
}

func newLocalWorkspace(top string, s Session, bases *sharedBases) *localWorkspace {
	return &localWorkspace{session: s, uid: s.UID, top: top, bases: bases,
		dir: filepath.Join(top, "checkout"), home: filepath.Join(top, "home"), tmp: filepath.Join(top, "tmp"),
		lower: filepath.Join(top, "lower"), upper: filepath.Join(top, "upper"), work: filepath.Join(top, "work")}
}

// build makes a fresh checkout: an empty upper layer over the base's tree
// shared with the other workspaces of its base, where the host can show
// it as the session's user's; else the base unpacked into a lower layer of
// the session's own, handed to its user. Everything the session sees is
// its user's, the top folder 0700.
func (ws *localWorkspace) build(ctx context.Context, base Base) error {
	if err := ws.remove(); err != nil {
		return err
	}
	if shared, err := ws.buildShared(ctx, base); shared || err != nil {
		return err
	}
	if err := os.Mkdir(ws.lower, 0o700); err != nil {
		return fmt.Errorf("sandbox: checkout: %w", err)
	}
	if err := unpackBase(ctx, base, ws.lower); err != nil {
		return err
	}
	if err := chownTree(ws.lower, ws.uid, ws.uid); err != nil {
		return err
	}
	return ws.layer()
}

// buildShared lays the checkout over the shared tree of base; false
// when it cannot be shared (no ID, or a host without idmapped mounts or
// overlays, which turns sharing off for good).
func (ws *localWorkspace) buildShared(ctx context.Context, base Base) (bool, error) {
	tree, ok, err := ws.bases.take(ctx, base)
	if !ok || err != nil {
		return false, err
	}
	if err := ws.mkLayers(); err != nil {
		ws.bases.release(tree)
		return false, err
	}
	err = mountSharedLayers(tree.dir, ws.uid, ws.upper, ws.work, ws.dir)
	if err == nil {
		ws.sharedMu.Lock()
		ws.shared, ws.layered = tree, true
		ws.sharedMu.Unlock()
		return true, nil
	}
	ws.bases.release(tree)
	if !errors.Is(err, errNoIdmap) && !errors.Is(err, ErrNoLayers) {
		return false, err
	}
	ws.bases.log.Warn("sessions of the same commit cannot share its tree here; each unpacks its own", "err", err)
	ws.bases.turnOff()
	for _, d := range []string{ws.upper, ws.work, ws.dir} {
		if err := RemoveTree(d); err != nil {
			return false, err
		}
	}
	return false, nil
}

// unpackBase writes base into the empty folder dir as it streams: files
// with their executable bit, folders, and symlinks as links, through an
// os.Root on dir, so no entry of any archive, however crafted, lands
// outside dir; entries whose names are not plain relative paths are
// skipped.
func unpackBase(ctx context.Context, base Base, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("sandbox: unpack: %w", err)
	}
	defer root.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := base.WriteTar(ctx, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	if err := unpack(tar.NewReader(pr), root); err != nil {
		pr.CloseWithError(err) // the writer stops on a closed pipe
		<-done
		return err
	}
	io.Copy(io.Discard, pr) // the archive's trailing padding
	return <-done
}

// unpack writes the archive's entries below root. Folders and links are
// made as they come; files go to unpackWriters writers at once, since
// creating a file is most of the cost and a file system creates several
// at a time faster than one after another (11,500 files: 0.8 s alone, 0.5
// s four at a time here). A file's folder comes before it in the archive,
// so it is there by the time a writer makes the file. Contents wait for
// a writer in memory, at most unpackQueued files of at most
// unpackInMemory bytes; a larger file is written by the reader itself.
func unpack(tr *tar.Reader, root *os.Root) error {
	files := make(chan unpackFile, unpackQueued)
	failed := make(chan error, unpackWriters)
	var writers sync.WaitGroup
	for range unpackWriters {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for f := range files {
				if err := writeNew(root, f.name, f.mode, bytes.NewReader(f.content)); err != nil {
					failed <- fmt.Errorf("sandbox: unpack %s: %w", f.name, err)
					for range files {
						// drained, so the reader never blocks on a full queue
					}
					return
				}
			}
		}()
	}
	err := readEntries(tr, root, files, failed)
	close(files)
	writers.Wait()
	close(failed)
	if err != nil {
		return err
	}
	return <-failed // nil when no writer failed
}

// Bounds of unpack's writers and what waits for them.
const (
	unpackWriters  = 4
	unpackQueued   = 64
	unpackInMemory = 256 << 10
)

// unpackFile is a file that waits for one of unpack's writers.
type unpackFile struct {
	name    string
	mode    os.FileMode
	content []byte
}

// readEntries is unpack's reader: it makes folders and links, and hands
// files to the writers, until the archive ends or a writer fails.
func readEntries(tr *tar.Reader, root *os.Root, files chan<- unpackFile, failed <-chan error) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sandbox: unpack: %w", err)
		}
		name := path.Clean(h.Name)
		if name == "." || path.IsAbs(name) || name == ".." || len(name) > 2 && name[:3] == "../" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, 0o755)
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, name)
		case tar.TypeReg:
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			if h.Size > unpackInMemory {
				err = writeNew(root, name, mode, tr)
				break
			}
			content := make([]byte, h.Size)
			if _, err = io.ReadFull(tr, content); err != nil {
				break
			}
			select {
			case files <- unpackFile{name: name, mode: mode, content: content}:
			case err := <-failed:
				return err
			}
		}
		if err != nil {
			return fmt.Errorf("sandbox: unpack %s: %w", name, err)
		}
	}
}

// writeNew creates name below root, which must not exist, with content.
func writeNew(root *os.Root, name string, mode os.FileMode, content io.Reader) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// layer mounts the overlay of an empty upper folder over the unpacked base
// at dir, or, where the host has no overlay, makes the unpacked base dir
// itself.
func (ws *localWorkspace) layer() error {
	if err := ws.mkLayers(); err != nil {
		return err
	}
	err := MountLayers(ws.lower, ws.upper, ws.work, ws.dir)
	if err == nil {
		ws.layered = true
		return nil
	}
	if !errors.Is(err, ErrNoLayers) {
		return err
	}
	ws.layered = false
	for _, d := range []string{ws.upper, ws.work, ws.dir} {
		if err := RemoveTree(d); err != nil {
			return err
		}
	}
	return os.Rename(ws.lower, ws.dir)
}

// sparesAhead is how many helpers wait for a session's next commands: a
// helper's start-up takes longer than a short command, so commands run
// back to back would otherwise catch up with the one started for them.
// Three, since a spare starts up at a low priority (on spare CPU only) and
// then waits for the kernel to move it into its cgroups: two started for
// commands 25 ms apart were often not ready yet on a busy 2-core host.
const sparesAhead = 3

// prepareSpares starts, in the background, helpers for the workspace's
// next commands, run as uid, until want wait or start (at most
// sparesAhead); those waiting too long to be handed a command are ended.
// The answer waits until the helpers it started are in the workspace's
// list (started, not ready), where a command takes them.
func (ws *localWorkspace) prepareSpares(box *Sandbox, uid uint32, want int, log *slog.Logger) (listed func()) {
	ws.spareMu.Lock()
	generation := ws.generation
	fresh := ws.spares[:0]
	var stale []*Spare
	for _, spare := range ws.spares {
		if spare.fresh() {
			fresh = append(fresh, spare)
		} else {
			stale = append(stale, spare)
		}
	}
	ws.spares = fresh
	missing := max(min(want, sparesAhead)-len(ws.spares)-ws.starting, 0)
	ws.starting += missing
	ws.spareMu.Unlock()
	for _, spare := range stale {
		go spare.Close()
	}
	var starts sync.WaitGroup
	for range missing {
		starts.Go(func() {
			spare, err := box.Spare(uid)
			ws.spareMu.Lock()
			ws.starting--
			// Not when the checkout was removed meanwhile: it saw old mounts.
			keep := err == nil && ws.generation == generation && len(ws.spares) < sparesAhead
			if keep {
				ws.spares = append(ws.spares, spare)
			}
			ws.spareMu.Unlock()
			if err != nil {
				log.Warn("no spare sandbox helper", "err", err)
			} else if !keep {
				spare.Close()
			}
		})
	}
	return starts.Wait
}

// takeSpare hands the oldest waiting helper, if any, to a command.
func (ws *localWorkspace) takeSpare() *Spare {
	ws.spareMu.Lock()
	defer ws.spareMu.Unlock()
	if len(ws.spares) == 0 {
		return nil
	}
	spare := ws.spares[0]
	ws.spares = ws.spares[1:]
	return spare
}

// dropSpares ends the waiting helpers: the workspace's mounts change or go.
func (ws *localWorkspace) dropSpares() {
	ws.spareMu.Lock()
	spares := ws.spares
	ws.spares = nil
	ws.generation++
	ws.spareMu.Unlock()
	for _, spare := range spares {
		spare.Close()
	}
}

// mkLayers makes the overlay's upper and work folders and its mount
// point. The overlay's top folder is the upper one's: the session's, 0700.
func (ws *localWorkspace) mkLayers() error {
	for _, d := range []string{ws.upper, ws.work, ws.dir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("sandbox: checkout: %w", err)
		}
	}
	if err := os.Lchown(ws.upper, int(ws.uid), int(ws.uid)); err != nil {
		return fmt.Errorf("sandbox: checkout: %w", err)
	}
	return nil
}

// remove unmounts the checkout's overlay, a leftover of a server that
// stopped included, and removes its folders.
func (ws *localWorkspace) remove() error {
	ws.dropSpares()
	if err := UnmountLayers(ws.dir); err != nil {
		return err
	}
	ws.releaseShared()
	var errs []error
	for _, d := range []string{ws.dir, ws.lower, ws.upper, ws.work} {
		errs = append(errs, RemoveTree(d))
	}
	return errors.Join(errs...)
}

// releaseShared gives back the shared tree under the overlay, once the
// overlay is down.
func (ws *localWorkspace) releaseShared() {
	ws.sharedMu.Lock()
	defer ws.sharedMu.Unlock()
	if ws.shared != nil {
		ws.bases.release(ws.shared)
		ws.shared = nil
	}
}

// replaceFile removes whatever is at p (never following a link the
// session's user may have left there) and, when exists, writes content.
// What it creates belongs to the session's user with the modes an editor
// under umask 022 would give, and a file that was executable stays so: the
// person's own tools must be able to change it and the folders around it.
func replaceFile(root *os.Root, p string, content []byte, exists bool, uid, gid uint32) error {
	perm := fs.FileMode(0o644)
	if fi, err := root.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		perm = 0o755
	}
	if err := removeIn(root, p); err != nil {
		return err
	}
	if !exists {
		return nil
	}
	if err := mkdirAllOwned(root, path.Dir(p), uid, gid); err != nil {
		return err
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Lchown(p, int(uid), int(gid))
	}
	return err
}

// removeIn removes p in root and all below it, with the bounded
// descriptors of RemoveTreeAt: a shell of the session may have made it a
// folder thousands of levels deep.
func removeIn(root *os.Root, p string) error {
	parent, err := root.OpenFile(path.Dir(p), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	defer parent.Close()
	return RemoveTreeAt(int(parent.Fd()), path.Base(p))
}

// mkdirAllOwned creates the folders of dir that are missing, each 0755 and
// owned by the session's user; folders that exist are left as they are.
func mkdirAllOwned(root *os.Root, dir string, uid, gid uint32) error {
	if dir == "." || dir == "" {
		return nil
	}
	if err := mkdirAllOwned(root, path.Dir(dir), uid, gid); err != nil {
		return err
	}
	err := root.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return root.Lchown(dir, int(uid), int(gid))
}

// chownTree gives a freshly built tree to the session's user, without
// following links.
func chownTree(dir string, uid, gid uint32) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}
