// Package codestore publishes the trees of canonical commits into the object
// store and reads them back. Trees and blobs are stored under content
// addresses ("trees/<sha>", "blobs/<sha>"), so a second publish stores only
// what changed, and reading a folder costs one tree object, which never
// changes and so is cached in memory. When the object store misses or cannot
// be reached, reads fall back to the git service.
package codestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/storage"
)

var (
	// ErrNotFound is a path that is not in the commit.
	ErrNotFound = fault.New(fault.NotFound, "not_found", "codestore: no such file or folder", "No such file or folder.")
	// ErrIsDir is a file read of a folder.
	ErrIsDir = fault.New(fault.BadInput, "is_dir", "codestore: that is a folder", "That is a folder.")
)

// Kinds of entries in a listing.
const (
	KindFile      = "file"
	KindDir       = "dir"
	KindSymlink   = "symlink"
	KindSubmodule = "submodule"
)

// Entry is one item of a folder.
type Entry struct {
	Name string `json:"name"`
	Kind string `json:"type"`
	Size int64  `json:"size"`
	SHA  string `json:"-"`
}

// objectTimeout bounds each object store call on the read path, so an
// unreachable store costs a request at most this before git answers.
const objectTimeout = 3 * time.Second

// Store publishes and reads code trees.
type Store struct {
	objects storage.ObjectStore
	git     *gitsvc.Service
	db      *models.Store
	log     *slog.Logger
	opts    Options
	trees   *lru.Cache[string, []Entry] // tree sha → entries; trees are immutable
	roots   sync.Map                    // commit sha → root tree sha; commits are immutable
	indexes *lru.Cache[string, *Index]  // root tree or commit sha → its paths, for quick open
	// publishing maps a commit sha to its *publishRun while one runs.
	publishing sync.Map
	// collect asks the collector's loop for a pass soon (CollectSoon).
	collect chan struct{}
}

// cachedIndexes is how many path indexes stay in memory: a 100,000-file
// tree's is a few MB, and a few projects are browsed at a time.
const cachedIndexes = 8

// Options are a Store's bounds; zero fields take the defaults.
type Options struct {
	// CachedTrees is how many parsed trees stay in memory; 1,000.
	CachedTrees int
	// Grace protects what a publish relies on from the collector: no
	// object used (stored or claimed by a publish) more recently is
	// swept, and a publish records nothing later than three quarters of
	// it after its first claim. Every instance sharing a database must
	// use the same. DefaultGrace.
	Grace time.Duration
	// MaxProjectBytes bounds the size of a project's code: the files of a
	// canonical tree, each path counted (ATELIER_PROJECT_MAX_BYTES).
	// DefaultMaxProjectBytes.
	MaxProjectBytes int64
}

// Defaults of Options.
const (
	DefaultGrace           = time.Hour
	DefaultMaxProjectBytes = 2 << 30
)

// New returns a Store over the object store, the git service and the
// database.
func New(objects storage.ObjectStore, git *gitsvc.Service, db *models.Store, log *slog.Logger, opts Options) (*Store, error) {
	if opts.CachedTrees <= 0 {
		opts.CachedTrees = 1000
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.MaxProjectBytes <= 0 {
		opts.MaxProjectBytes = DefaultMaxProjectBytes
	}
	trees, err := lru.New[string, []Entry](opts.CachedTrees)
	if err != nil {
		return nil, fmt.Errorf("codestore: %w", err)
	}
	indexes, err := lru.New[string, *Index](cachedIndexes)
	if err != nil {
		return nil, fmt.Errorf("codestore: %w", err)
	}
	return &Store{objects: objects, git: git, db: db, log: log, opts: opts, trees: trees, indexes: indexes,
		collect: make(chan struct{}, 1)}, nil
}

// ErrProjectTooLarge is code past Options.MaxProjectBytes: an import or a
// release that would make a project's tree larger than a project may be.
var ErrProjectTooLarge = fault.New(fault.TooLarge, "project_too_large",
	"codestore: the project's code would be larger than a project may be",
	"The project's code would be larger than a project may be; import or release less.")

// CheckProjectBytes refuses a tree of treeBytes that is past the bound.
func (s *Store) CheckProjectBytes(treeBytes int64) error {
	if treeBytes > s.opts.MaxProjectBytes {
		return fault.Detailf(ErrProjectTooLarge, ": %s, more than the %s a project may hold",
			HumanBytes(treeBytes), HumanBytes(s.opts.MaxProjectBytes))
	}
	return nil
}

// MaxProjectBytes is the bound CheckProjectBytes applies.
func (s *Store) MaxProjectBytes() int64 { return s.opts.MaxProjectBytes }

// HumanBytes writes a size as people read it: bytes, KiB, MiB or GiB, with
// one decimal past KiB.
func HumanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", n>>10)
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// Source is a commit of a repository.
type Source struct {
	Repo   *gitsvc.Repo
	Commit string
}

func treeKey(sha string) string { return "trees/" + sha }
func blobKey(sha string) string { return "blobs/" + sha }

// kindOf maps a git mode to what the Code page shows.
func kindOf(mode string) string {
	switch mode {
	case "040000":
		return KindDir
	case "120000":
		return KindSymlink
	case "160000":
		return KindSubmodule
	}
	return KindFile
}

// sortEntries puts folders first, then everything by name, as the tree shows
// them; published trees are stored in this order so reads never sort.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool {
		if (es[i].Kind == KindDir) != (es[j].Kind == KindDir) {
			return es[i].Kind == KindDir
		}
		return es[i].Name < es[j].Name
	})
}

// storedEntry is an Entry as kept in a tree object.
type storedEntry struct {
	Name string `json:"n"`
	Kind string `json:"k"`
	Size int64  `json:"z"`
	SHA  string `json:"s"`
}

func encodeTree(es []Entry) []byte {
	out := make([]storedEntry, len(es))
	for i, e := range es {
		out[i] = storedEntry(e)
	}
	b, _ := json.Marshal(out) // plain strings and numbers cannot fail
	return b
}

func decodeTree(b []byte) ([]Entry, error) {
	var in []storedEntry
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("codestore: corrupt tree object: %w", err)
	}
	out := make([]Entry, len(in))
	for i, e := range in {
		out[i] = Entry(e)
	}
	return out, nil
}

// List returns the entries of dir ("" is the root) at the source's commit:
// from the object store when the commit is published, else from git.
func (s *Store) List(ctx context.Context, src Source, dir string) ([]Entry, error) {
	if root, ok := s.publishedRoot(ctx, src.Commit); ok {
		es, err := s.walk(ctx, root, dir)
		if err == nil || errors.Is(err, ErrNotFound) {
			return es, err
		}
		s.log.Warn("codestore: object store read failed; reading through git", "commit", src.Commit, "dir", dir, "err", err)
	}
	return s.gitList(ctx, src, dir)
}

// Read returns up to max bytes of the file at path and its full size. It
// reads no more than max, whatever the file's size.
func (s *Store) Read(ctx context.Context, src Source, path string, max int64) ([]byte, int64, error) {
	rc, size, err := s.Open(ctx, src, path)
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, max))
	if err != nil {
		return nil, 0, fmt.Errorf("codestore: read %q: %w", path, err)
	}
	return data, size, nil
}

// walk loads the tree of dir by descending from the root tree.
func (s *Store) walk(ctx context.Context, root, dir string) ([]Entry, error) {
	es, err := s.tree(ctx, root)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return es, nil
	}
	for _, name := range strings.Split(dir, "/") {
		e, ok := find(es, name)
		if !ok || e.Kind != KindDir {
			return nil, ErrNotFound
		}
		if es, err = s.tree(ctx, e.SHA); err != nil {
			return nil, err
		}
	}
	return es, nil
}

func (s *Store) tree(ctx context.Context, sha string) ([]Entry, error) {
	return s.readTree(ctx, sha, true)
}

// readTree reads a tree from the cache, else the store; keep adds what the
// store gave to the cache. The collector's walk keeps nothing: it reads
// every tree once a pass, and would push out the trees people browse.
func (s *Store) readTree(ctx context.Context, sha string, keep bool) ([]Entry, error) {
	if es, ok := s.trees.Get(sha); ok {
		return es, nil
	}
	ctx, cancel := context.WithTimeout(ctx, objectTimeout)
	defer cancel()
	rc, err := s.objects.Get(ctx, treeKey(sha))
	if err != nil {
		// A published tree that is missing is a store problem, not a
		// missing path: fall back rather than answer 404.
		return nil, fmt.Errorf("codestore: tree %s: %w", sha, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("codestore: tree %s: %w", sha, err)
	}
	es, err := decodeTree(b)
	if err != nil {
		return nil, err
	}
	if keep {
		s.trees.Add(sha, es)
	}
	return es, nil
}

func (s *Store) publishedRoot(ctx context.Context, commit string) (string, bool) {
	if root, ok := s.roots.Load(commit); ok {
		return root.(string), true
	}
	root, err := s.db.PublishedRoot(ctx, commit)
	if err != nil {
		if !errors.Is(err, models.ErrNotFound) {
			s.log.Warn("codestore: published commits unreadable", "err", err)
		}
		return "", false
	}
	s.roots.Store(commit, root)
	return root, true
}

func (s *Store) gitList(ctx context.Context, src Source, dir string) ([]Entry, error) {
	ges, err := s.git.List(ctx, src.Repo, src.Commit, dir)
	if errors.Is(err, gitsvc.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	es := make([]Entry, len(ges))
	for i, g := range ges {
		es[i] = fromGit(g, g.Path)
	}
	sortEntries(es)
	return es, nil
}

func fromGit(g gitsvc.Entry, name string) Entry {
	size := g.Size
	if size < 0 {
		size = 0
	}
	return Entry{Name: name, Kind: kindOf(g.Mode), Size: size, SHA: g.SHA}
}

func find(es []Entry, name string) (Entry, bool) {
	for _, e := range es {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// splitPath splits "a/b/c" into "a/b" and "c".
func splitPath(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}
