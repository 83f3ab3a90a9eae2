// Package gitsvc runs git for all of Atelier. Every git process goes through
// one runner with a fixed environment, a timeout and bounded output, and user
// values are passed so that git can never read them as options. Every
// operation on a repository holds that repository's lock for its whole
// duration: a fair in-process reader/writer reservation paired with flock on
// <git common dir>/atelier.lock, so other processes and people's tools that
// take the same lock are respected.
package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"atelier/fault"
	"atelier/netblock"
)

// Sentinel errors. Failures of git itself are *GitError, which these wrap
// where a failure has one of these meanings.
var (
	ErrBadArgument   = fault.New(fault.BadInput, "bad_source", "gitsvc: bad argument", "Bad argument.")
	ErrBusy          = fault.New(fault.Unavailable, "repository_busy", "gitsvc: repository busy", "The repository is busy; try again in a moment.")
	ErrNotRepository = fault.New(fault.BadInput, "not_a_repository", "gitsvc: not a git repository", "The source is not a git repository.")
	ErrBadName       = errors.New("gitsvc: bad repository name")
	ErrNotFound      = fault.New(fault.NotFound, "not_found", "gitsvc: not found", "Not found.")
	// ErrConflict means the branch no longer points at the commit the caller
	// built on: someone else committed first. Nothing was overwritten.
	ErrConflict = errors.New("gitsvc: branch moved")
	// ErrNotBlob means a path names a folder or a submodule, not a file.
	ErrNotBlob = errors.New("gitsvc: not a file")
	// ErrSourceNotAllowed is a fetch source this caller may not use: one on
	// a network behind the server, or ssh for someone not trusted.
	ErrSourceNotAllowed = fault.New(fault.Forbidden, "source_not_allowed", "gitsvc: source not allowed", "Source not allowed.")
	// ErrUnreachable is a source whose host could not be resolved.
	ErrUnreachable = errors.New("gitsvc: source unreachable")
)

// Config is what the service needs; zero values take the defaults below.
type Config struct {
	Root      string        // <data>/git: canonical repositories live here as <name>.git
	GitPath   string        // the git binary; default "git" looked up in PATH
	Timeout   time.Duration // per git process; default 60 s
	LockWait  time.Duration // longest wait for a repository lock; default 30 s
	MaxOutput int64         // most bytes read from one process's stdout; default 256 MiB
	Log       *slog.Logger  // default: discard
	// AllowNetworks are networks an untrusted fetch may reach although
	// they are private, loopback or the server's own (see netblock).
	AllowNetworks []netip.Prefix
}

const (
	defaultTimeout   = 60 * time.Second
	defaultLockWait  = 30 * time.Second
	defaultMaxOutput = 256 << 20
	defaultPath      = "/usr/local/bin:/usr/bin:/bin"

	homeDir     = ".home"     // private HOME for git, under Root
	tmpDir      = ".tmp"      // temporary indexes and marks
	trashPrefix = ".removed-" // repositories on their way out
	lockName    = "atelier.lock"
)

// gitconfig is the whole global configuration git sees. The user is the
// author of commits the service makes; automatic gc must not detach, or it
// would keep working in the repository after the lock is released.
const gitconfig = `# Written by Atelier's git service at every start; edits are lost.
[user]
	name = Atelier
	email = atelier@localhost
[init]
	defaultBranch = main
[gc]
	autoDetach = false
[advice]
	detachedHead = false
`

// Service runs git. It is safe for concurrent use.
type Service struct {
	root      string
	git       string
	home      string
	tmp       string
	path      string
	timeout   time.Duration
	lockWait  time.Duration
	maxOutput int64
	log       *slog.Logger
	locks     *reservations
	allow     []netip.Prefix
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	// interfaces are the host's addresses and networks, read at each
	// fetch (netblock.Interfaces).
	interfaces func() ([]netip.Prefix, error)
}

// Repo is one repository. GitDir is the common git directory (shared by all
// worktrees); it is also the key of the repository's lock.
type Repo struct {
	GitDir   string // absolute
	WorkTree string // "" for a bare repository

	// own is this worktree's private git directory (HEAD, index); "" means
	// GitDir, as for a bare or main repository.
	own string

	// owner is the host account every git process on this repository runs
	// as; nil runs as the server (root). OpenLocal sets it for a folder
	// that belongs to someone else, so that a program named by the
	// folder's own config (a filter, a textconv, a hook, a helper) can
	// never run as root.
	owner *account
}

// account is a host account's uid and gid.
type account struct{ uid, gid uint32 }

// gitDir is the directory git is pointed at for this repository.
func (r *Repo) gitDir() string {
	if r.own != "" {
		return r.own
	}
	return r.GitDir
}

// New prepares Root (creating it if needed), the private HOME with its
// .gitconfig, and clears leftovers of interrupted removals.
func New(cfg Config) (*Service, error) {
	if cfg.Root == "" {
		return nil, errors.New("gitsvc: no root")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("gitsvc: root: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("gitsvc: root: %w", err)
	}
	// Lock keys are real paths; resolve the root once so canonical
	// repositories need no further resolution.
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("gitsvc: root: %w", err)
	}
	s := &Service{
		root:       root,
		git:        cfg.GitPath,
		home:       filepath.Join(root, homeDir),
		tmp:        filepath.Join(root, tmpDir),
		path:       os.Getenv("PATH"),
		timeout:    cfg.Timeout,
		lockWait:   cfg.LockWait,
		maxOutput:  cfg.MaxOutput,
		log:        cfg.Log,
		locks:      newReservations(),
		allow:      cfg.AllowNetworks,
		lookup:     lookupHost,
		interfaces: netblock.Interfaces,
	}
	if s.git == "" {
		s.git = "git"
	}
	if s.path == "" {
		s.path = defaultPath
	}
	if s.timeout <= 0 {
		s.timeout = defaultTimeout
	}
	if s.lockWait <= 0 {
		s.lockWait = defaultLockWait
	}
	if s.maxOutput <= 0 {
		s.maxOutput = defaultMaxOutput
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{s.home, s.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gitsvc: %w", err)
		}
	}
	if err := writeFileAtomic(filepath.Join(s.home, ".gitconfig"), []byte(gitconfig)); err != nil {
		return nil, fmt.Errorf("gitsvc: gitconfig: %w", err)
	}
	s.sweep()
	return s, nil
}

// staleAge is how old a temporary index must be before sweep removes it.
// Another process of ours may share Root and be using a young one, and a
// write-tree from a vanished index would commit an empty tree.
const staleAge = 24 * time.Hour

// sweep removes what an interrupted RemoveRepo, CommitTree or BuildTree left
// behind.
// Failures only cost disk space, so they are logged, not returned.
func (s *Service) sweep() {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		s.log.Warn("gitsvc: sweep", "err", err)
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), trashPrefix) {
			if err := os.RemoveAll(filepath.Join(s.root, e.Name())); err != nil {
				s.log.Warn("gitsvc: sweep", "err", err)
			}
		}
	}
	tmps, err := os.ReadDir(s.tmp)
	if err != nil {
		s.log.Warn("gitsvc: sweep", "err", err)
		return
	}
	for _, e := range tmps {
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleAge {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.tmp, e.Name())); err != nil {
			s.log.Warn("gitsvc: sweep", "err", err)
		}
	}
}

func writeFileAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
