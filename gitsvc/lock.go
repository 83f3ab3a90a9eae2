package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"atelier/fault"
	"atelier/internal/txwatch"
)

// A repository lock has two halves, always taken in this order and released
// in the reverse one:
//
//  1. a reservation in this process, fair between readers and writers: a
//     queued writer is not overtaken by readers that arrive after it;
//  2. flock on <git common dir>/atelier.lock, LOCK_SH for readers and
//     LOCK_EX for writers, which other processes of ours and people's tools
//     (flock(1)) see too.
//
// Because our own readers drop their flock before their reservation, a
// writer of ours never waits on a flock held by readers of this process.
// The lock file is never deleted: a waiter holding a deleted file's
// descriptor would think it owned a lock nobody else can see.

// Lock takes the lock of the repository whose common git directory is
// gitDir: shared when write is false, exclusive when it is true. It waits at
// most Config.LockWait (then the error wraps ErrBusy) and stops waiting when
// ctx ends. release is safe to call more than once.
//
// The repository methods take this lock themselves, and it is not
// reentrant: while holding it, call them with the context from Hold instead.
func (s *Service) Lock(ctx context.Context, gitDir string, write bool) (release func(), err error) {
	key, err := resolveGitDir(gitDir)
	if err != nil {
		return nil, err
	}
	return s.lock(ctx, key, write)
}

// resolveGitDir is the key of gitDir's lock: its real path.
func resolveGitDir(gitDir string) (string, error) {
	if !filepath.IsAbs(gitDir) {
		return "", fault.Detailf(ErrBadArgument, ": git dir %q is not absolute", gitDir)
	}
	key, err := filepath.EvalSymlinks(gitDir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("gitsvc: lock %s: %w: %w", gitDir, ErrNotFound, err)
	}
	if err != nil {
		return "", fmt.Errorf("gitsvc: lock %s: %w", gitDir, err)
	}
	return key, nil
}

type heldKey struct{}

// held is a lock carried by a context from Hold.
type held struct {
	s      *Service
	key    string
	write  bool
	done   atomic.Bool
	parent *held
}

// Hold is Lock for a sequence of calls: the returned context carries the
// lock, and repository methods called with it on the same repository run
// inside it instead of waiting for it again. A write lock covers reads; a
// method that writes under a held read lock fails rather than deadlock.
func (s *Service) Hold(ctx context.Context, gitDir string, write bool) (context.Context, func(), error) {
	txwatch.Slow(ctx, "git lock") // it waits for every other holder
	release, err := s.Lock(ctx, gitDir, write)
	if err != nil {
		return nil, nil, err
	}
	key, _ := filepath.EvalSymlinks(gitDir) // resolved by Lock a moment ago
	h := &held{s: s, key: key, write: write}
	h.parent, _ = ctx.Value(heldKey{}).(*held)
	return context.WithValue(ctx, heldKey{}, h), func() {
		h.done.Store(true)
		release()
	}, nil
}

// lock takes the lock of the repository whose resolved git dir is key.
func (s *Service) lock(ctx context.Context, key string, write bool) (func(), error) {
	return s.lockAs(ctx, key, write, nil)
}

// lockAs is lock on a repository that belongs to owner (nil: the server):
// a lock file it creates there is given to the owner.
func (s *Service) lockAs(ctx context.Context, key string, write bool, owner *account) (func(), error) {
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.parent {
		if h.s != s || h.key != key || h.done.Load() {
			continue
		}
		if write && !h.write {
			return nil, fmt.Errorf("gitsvc: lock %s: the context holds a read lock and this needs the write lock", key)
		}
		return func() {}, nil
	}

	deadline := time.Now().Add(s.lockWait)
	if err := s.locks.acquire(ctx, key, write, deadline); err != nil {
		return nil, s.lockError(key, write, err)
	}
	f, err := flockFile(ctx, filepath.Join(key, lockName), write, deadline, owner)
	if err != nil {
		s.locks.release(key, write)
		return nil, s.lockError(key, write, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			// Unlock explicitly: a process forked meanwhile may hold a
			// copy of the descriptor until it execs, and closing ours
			// alone would leave the lock held through that copy.
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
			f.Close()
			s.locks.release(key, write)
		})
	}, nil
}

func (s *Service) lockError(key string, write bool, err error) error {
	kind := "read"
	if write {
		kind = "write"
	}
	switch {
	case errors.Is(err, ErrBusy):
		return fmt.Errorf("gitsvc: %s lock on %s not free within %s: %w", kind, key, s.lockWait, ErrBusy)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("gitsvc: %s lock on %s: %w: %w", kind, key, ErrNotFound, err)
	default:
		return fmt.Errorf("gitsvc: %s lock on %s: %w", kind, key, err)
	}
}

// flockFile opens the lock file, creating it if needed, and locks it.
// flock(2) cannot be interrupted, so it polls with LOCK_NB and a growing
// pause until the lock is free, ctx ends or the deadline passes.
func flockFile(ctx context.Context, name string, write bool, deadline time.Time, owner *account) (*os.File, error) {
	f, err := openLockFile(name, owner)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if write {
		how = unix.LOCK_EX
	}
	pause := 2 * time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", name, err)
		}
		wait := min(pause, time.Until(deadline))
		if wait <= 0 {
			f.Close()
			return nil, ErrBusy
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// openLockFile opens the lock file name, a resolved path, creating it for
// owner (nil: the server) when it is missing.
//
// A Local folder's git dir belongs to its owner, who may put a link
// anywhere on the path after it was resolved: no link is followed, so root
// neither creates nor opens a file elsewhere through one, and a git dir
// that is not the owner's is refused. A file found
// there (the owner's, or one they hard-linked) is only ever locked, never
// written or given away; only a file this call created is chowned.
func openLockFile(name string, owner *account) (*os.File, error) {
	dir, err := openDirNoLinks(filepath.Dir(name))
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	if owner != nil {
		// The git dir is where git, run as the owner, said it is; a
		// worktree's commondir file can name any folder. Root makes a
		// file only in a folder the owner could make it in themselves.
		var st unix.Stat_t
		if err := unix.Fstat(dir, &st); err != nil {
			return nil, &fs.PathError{Op: "stat", Path: filepath.Dir(name), Err: err}
		}
		if st.Uid != owner.uid {
			return nil, fmt.Errorf("%w: git dir %s belongs to uid %d, not to the folder's owner %d",
				ErrBadArgument, filepath.Dir(name), st.Uid, owner.uid)
		}
	}
	open := func(flags int) (*os.File, error) {
		flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
		fd, err := unix.Openat(dir, filepath.Base(name), flags, 0o644)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
	f, err := open(unix.O_RDWR | unix.O_CREAT | unix.O_EXCL)
	if err == nil {
		if owner != nil {
			if err := f.Chown(int(owner.uid), int(owner.gid)); err != nil {
				f.Close()
				return nil, err
			}
		}
		return f, nil
	}
	if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.EROFS) {
		f, err = open(unix.O_RDWR)
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
			// flock works on a read-only descriptor too.
			f, err = open(unix.O_RDONLY)
		}
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	return f, nil
}

// openDirNoLinks opens the folder at the absolute, clean path p one part at
// a time from /, refusing a link in any part, and returns an O_PATH
// descriptor for it. (openat2's RESOLVE_NO_SYMLINKS says the same in one
// call, but container runtimes' seccomp profiles still refuse it.)
func openDirNoLinks(p string) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return -1, fault.Detailf(ErrBadArgument, ": folder %q is not absolute and clean", p)
	}
	fd, err := unix.Open("/", flags, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	for _, part := range strings.Split(p, "/")[1:] {
		if part == "" {
			continue // p is "/"
		}
		next, err := unix.Openat(fd, part, flags, 0)
		unix.Close(fd)
		if err != nil {
			// ENOTDIR here is a link (or a file) where a folder was.
			return -1, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		fd = next
	}
	return fd, nil
}

// reservations are the in-process halves of repository locks.
type reservations struct {
	mu    sync.Mutex
	gates map[string]*gate
}

// gate is one repository's reservation. Grants go strictly in queue order,
// except that a reader arriving with nobody queued joins current readers.
type gate struct {
	readers int
	writer  bool
	queue   []*waiter
	users   int // holders and waiters; the gate is forgotten at zero
}

type waiter struct {
	write   bool
	granted chan struct{} // closed when granted
}

func newReservations() *reservations {
	return &reservations{gates: make(map[string]*gate)}
}

func (g *gate) free(write bool) bool {
	if write {
		return !g.writer && g.readers == 0
	}
	return !g.writer
}

func (g *gate) take(write bool) {
	if write {
		g.writer = true
	} else {
		g.readers++
	}
}

func (g *gate) drop(write bool) {
	if write {
		g.writer = false
	} else {
		g.readers--
	}
}

// wake grants waiters from the head of the queue while they fit: a run of
// readers together, or one writer.
func (g *gate) wake() {
	for len(g.queue) > 0 && g.free(g.queue[0].write) {
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		g.take(w.write)
		close(w.granted)
	}
}

func (g *gate) remove(w *waiter) {
	for i, q := range g.queue {
		if q == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return
		}
	}
}

// acquire waits for the reservation until ctx ends or the deadline passes
// (ErrBusy). A waiter that gives up leaves the queue, which may let those
// behind it through.
func (rs *reservations) acquire(ctx context.Context, key string, write bool, deadline time.Time) error {
	rs.mu.Lock()
	g := rs.gates[key]
	if g == nil {
		g = &gate{}
		rs.gates[key] = g
	}
	g.users++
	if len(g.queue) == 0 && g.free(write) {
		g.take(write)
		rs.mu.Unlock()
		return nil
	}
	w := &waiter{write: write, granted: make(chan struct{})}
	g.queue = append(g.queue, w)
	rs.mu.Unlock()

	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var err error
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = ErrBusy
	}

	rs.mu.Lock()
	defer rs.mu.Unlock()
	select {
	case <-w.granted:
		g.drop(w.write) // granted as we gave up: hand it on
	default:
		g.remove(w)
	}
	g.wake()
	rs.leave(key, g)
	return err
}

func (rs *reservations) release(key string, write bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	g := rs.gates[key]
	g.drop(write)
	g.wake()
	rs.leave(key, g)
}

func (rs *reservations) leave(key string, g *gate) {
	if g.users--; g.users == 0 {
		delete(rs.gates, key)
	}
}

// HoldRepo is Hold for a repository as OpenLocal or OpenBare returned it:
// a Local folder's lock file is opened and made by its owner's rules
// (see rlock), never through a link.
func (s *Service) HoldRepo(ctx context.Context, r *Repo, write bool) (context.Context, func(), error) {
	txwatch.Slow(ctx, "git lock") // it waits for every other holder
	release, err := s.rlock(ctx, r, write)
	if err != nil {
		return nil, nil, err
	}
	key := r.GitDir
	if r.owner == nil {
		key, _ = resolveGitDir(r.GitDir) // resolved by rlock a moment ago
	}
	h := &held{s: s, key: key, write: write}
	h.parent, _ = ctx.Value(heldKey{}).(*held)
	return context.WithValue(ctx, heldKey{}, h), func() {
		h.done.Store(true)
		release()
	}, nil
}
