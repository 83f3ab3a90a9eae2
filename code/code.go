// Package code is the Code page's domain: what a member sees of a project's
// code. A Container project's code is its canonical repository, read
// through the code store (object store first, git when that fails); a Local
// project's code is the person's folder itself, read live and never
// followed out of its root.
package code

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/limits"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
	"atelier/workspace"
)

var (
	// ErrLocalProject refuses what only a Container project has, such as
	// importing into canonical.
	ErrLocalProject = fault.New(fault.Conflict, "local_project", "code: a Local project's code is its folder; import into it with your own tools", "A Local project's code is its folder; import into it with your own tools.")
	// ErrNoCanonical is a Container project whose repository is missing.
	ErrNoCanonical = fault.New(fault.Conflict, "no_canonical", "code: the project has no canonical repository", "The project has no canonical repository.")
)

// DisplayLimit is the largest text file the viewer shows; bigger ones are
// offered for download only.
const DisplayLimit = 1 << 20

// binarySniff is how much of a file is searched for a NUL byte to call it
// binary, as git does.
const binarySniff = 8000

// Service reads and imports project code.
type Service struct {
	ws      *workspace.Workspaces
	git     *gitsvc.Service
	store   *codestore.Store
	db      *models.Store
	log     *slog.Logger
	limits  ImportLimits
	running *limits.Gate[int64] // imports running on this instance
}

// ImportLimits bound imports, each of which holds a git process, an
// upload and a publish; zero fields take the defaults.
type ImportLimits struct {
	Running int // imports running at once on the instance; 2
	PerHour int // imports one person may start in an hour; 30
	// MaxExpandedBytes bounds what one archive unpacks to, its files'
	// contents and links' texts together; 1 GiB.
	MaxExpandedBytes int64
}

// DefaultMaxExpandedBytes is ImportLimits.MaxExpandedBytes when unset.
const DefaultMaxExpandedBytes = 1 << 30

// Options are what a Service works with.
type Options struct {
	Workspace *workspace.Workspaces
	Git       *gitsvc.Service
	Code      *codestore.Store
	DB        *models.Store
	Log       *slog.Logger
	Imports   ImportLimits
}

// NewService returns a Service.
func NewService(o Options) *Service {
	ws, git, store, db, log, il := o.Workspace, o.Git, o.Code, o.DB, o.Log, o.Imports
	if il.Running <= 0 {
		il.Running = 2
	}
	if il.PerHour <= 0 {
		il.PerHour = 30
	}
	if il.MaxExpandedBytes <= 0 {
		il.MaxExpandedBytes = DefaultMaxExpandedBytes
	}
	return &Service{ws: ws, git: git, store: store, db: db, log: log, limits: il,
		running: limits.NewGate[int64](0, il.Running, ErrImportBusy)}
}

// Entry is one item of a folder listing.
type Entry struct {
	Name   string `json:"name"`
	Kind   string `json:"type"` // file | dir | symlink | submodule | other
	Size   int64  `json:"size"`
	Target string `json:"target,omitempty"` // a Local symlink's text
}

// Head is what the Code page's header says the tree is at.
type Head struct {
	Local  bool   `json:"local"`
	Folder string `json:"folder,omitempty"` // Local only
	IsRepo bool   `json:"isRepo"`
	Commit string `json:"commit,omitempty"`
	Branch string `json:"branch,omitempty"`
}

// File is a file as the viewer shows it.
type File struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Binary   bool   `json:"binary"`
	TooLarge bool   `json:"tooLarge"`
	// ReadOnly is a name that may be read but never written through
	// Atelier (workspace.CheckNewPath): it came in before the rule, or a
	// Local folder's owner wrote it.
	ReadOnly bool   `json:"readOnly,omitempty"`
	Text     string `json:"-"`
}

// Head says where the project's tree is.
func (s *Service) Head(ctx context.Context, p *models.Project) (Head, error) {
	if p.WorkspaceMode != models.ModeLocal {
		if p.CanonicalCommit == nil {
			return Head{}, ErrNoCanonical
		}
		return Head{IsRepo: true, Commit: *p.CanonicalCommit, Branch: "main"}, nil
	}
	loc := projects.Location(p)
	l, err := s.ws.OpenLocal(loc)
	if err != nil {
		return Head{}, err
	}
	defer l.Close()
	h := Head{Local: true, Folder: loc.Path}
	repo, err := s.git.OpenLocal(ctx, l.Path()) // why a path: workspace.LocalFS.Path
	if errors.Is(err, gitsvc.ErrNotRepository) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	h.IsRepo = true
	h.Commit, h.Branch, err = s.git.Head(ctx, repo)
	if errors.Is(err, gitsvc.ErrNotFound) { // a repository without commits yet
		return h, nil
	}
	return h, err
}

// List returns one level of dir ("" is the root).
func (s *Service) List(ctx context.Context, p *models.Project, dir string) ([]Entry, error) {
	if err := workspace.CheckRelDir(dir); err != nil {
		return nil, err
	}
	if p.WorkspaceMode == models.ModeLocal {
		return withLocal(s, p, func(l *workspace.LocalFS) ([]Entry, error) {
			des, err := l.ReadDir(dir)
			if err != nil {
				return nil, err
			}
			es := make([]Entry, len(des))
			for i, d := range des {
				es[i] = Entry{Name: d.Name, Kind: string(d.Kind), Size: d.Size, Target: d.Target}
			}
			return es, nil
		})
	}
	src, err := s.source(p)
	if err != nil {
		return nil, err
	}
	ces, err := s.store.List(ctx, src, dir)
	if err != nil {
		return nil, err
	}
	es := make([]Entry, len(ces))
	for i, c := range ces {
		es[i] = Entry{Name: c.Name, Kind: c.Kind, Size: c.Size}
	}
	return es, nil
}

// Read returns the file for the viewer: its text when it is text and small
// enough to show, else only what it is.
func (s *Service) Read(ctx context.Context, p *models.Project, path string) (File, error) {
	data, size, err := s.read(ctx, p, path, DisplayLimit+1)
	if err != nil {
		return File{}, err
	}
	f := File{Path: path, Size: size, Binary: isBinary(data), ReadOnly: workspace.CheckNewPath(path) != nil}
	switch {
	case f.Binary:
	case size > DisplayLimit:
		f.TooLarge = true
	default:
		f.Text = string(data)
	}
	return f, nil
}

// Raw opens the file for download, with its size. The bytes are streamed
// from the folder, the object store or git, never read whole into memory.
// A reader that also implements io.Seeker can serve ranges.
func (s *Service) Raw(ctx context.Context, p *models.Project, path string) (io.ReadCloser, int64, error) {
	if err := workspace.CheckRelPath(path); err != nil {
		return nil, 0, err
	}
	if p.WorkspaceMode == models.ModeLocal {
		l, err := s.ws.OpenLocal(projects.Location(p))
		if err != nil {
			return nil, 0, err
		}
		f, size, err := l.Open(path)
		l.Close() // an open file outlives its root
		if err != nil {
			return nil, 0, err
		}
		return f, size, nil
	}
	src, err := s.source(p)
	if err != nil {
		return nil, 0, err
	}
	return s.store.Open(ctx, src, path)
}

func (s *Service) read(ctx context.Context, p *models.Project, path string, max int64) ([]byte, int64, error) {
	if err := workspace.CheckRelPath(path); err != nil {
		return nil, 0, err
	}
	if p.WorkspaceMode == models.ModeLocal {
		var size int64
		data, err := withLocal(s, p, func(l *workspace.LocalFS) ([]byte, error) {
			d, n, err := l.ReadFile(path, max)
			size = n
			return d, err
		})
		return data, size, err
	}
	src, err := s.source(p)
	if err != nil {
		return nil, 0, err
	}
	return s.store.Read(ctx, src, path, max)
}

// source is the canonical commit of a Container project.
func (s *Service) source(p *models.Project) (codestore.Source, error) {
	if p.CanonicalCommit == nil {
		return codestore.Source{}, ErrNoCanonical
	}
	repo, err := s.git.OpenBare(projects.CanonicalName(p.ID))
	if err != nil {
		return codestore.Source{}, fmt.Errorf("%w: %w", ErrNoCanonical, err)
	}
	return codestore.Source{Repo: repo, Commit: *p.CanonicalCommit}, nil
}

// withLocal opens the Local project's folder, checked to be the one
// admitted at creation, as a root no read can leave.
func withLocal[T any](s *Service, p *models.Project, fn func(*workspace.LocalFS) (T, error)) (T, error) {
	var zero T
	l, err := s.ws.OpenLocal(projects.Location(p))
	if err != nil {
		return zero, err
	}
	defer l.Close()
	return fn(l)
}

// Remotes lists the git remotes of the project's code, without credentials.
func (s *Service) Remotes(ctx context.Context, p *models.Project) (gitsvc.Remotes, error) {
	if p.WorkspaceMode == models.ModeLocal {
		l, err := s.ws.OpenLocal(projects.Location(p))
		if err != nil {
			return gitsvc.Remotes{}, err
		}
		defer l.Close()
		return s.git.Remotes(ctx, l.Path()) // why a path: workspace.LocalFS.Path
	}
	path, err := s.git.CanonicalPath(projects.CanonicalName(p.ID))
	if err != nil {
		return gitsvc.Remotes{}, err
	}
	return s.git.Remotes(ctx, path)
}

func isBinary(data []byte) bool {
	n := min(len(data), binarySniff)
	for _, b := range data[:n] {
		if b == 0 {
			return true
		}
	}
	return false
}
