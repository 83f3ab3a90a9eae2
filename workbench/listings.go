package workbench

import (
	"runtime"
	"sort"
	"sync"
	"weak"

	"atelier/gitsvc"
)

// baseListing is a commit's tree as captures compare with it: path →
// entry for its blobs, links and submodules, with the indexes a capture
// asks for made when first needed. It is read only once made, and shared
// by every checkout of the commit on this instance: a second session of a
// commit (another person's) lists nothing, and its first command does not
// wait for the listing of thousands of files.
type baseListing struct {
	entries map[string]gitsvc.Entry

	sortOnce sync.Once
	sorted   []string // the blobs' paths, sorted
	foldOnce sync.Once
	folders  map[string]bool // folders holding a blob, at any depth
}

// paths are the paths of the base's files and links, sorted, so the ones
// below a folder are found without looking at the others.
func (l *baseListing) paths() []string {
	l.sortOnce.Do(func() {
		l.sorted = make([]string, 0, len(l.entries))
		for p, b := range l.entries {
			if b.Type == "blob" {
				l.sorted = append(l.sorted, p)
			}
		}
		sort.Strings(l.sorted)
	})
	return l.sorted
}

// holds says the base has a file or link below the folder p.
func (l *baseListing) holds(p string) bool {
	l.foldOnce.Do(func() {
		l.folders = map[string]bool{}
		for q, b := range l.entries {
			if b.Type != "blob" {
				continue
			}
			for d := parentDir(q); d != "" && !l.folders[d]; d = parentDir(d) {
				l.folders[d] = true
			}
		}
	})
	return l.folders[p]
}

// listings are the base listings the checkouts of this instance hold, by
// commit: a commit names its tree whichever repository holds it (each
// session's fork, the project's canonical), as the shared exported base
// does (gitBase.ID). The map holds them weakly: a listing lives as long as
// a checkout refers to it, so sharing costs no memory beyond what the
// checkouts held each on their own before.
type listings struct {
	mu   sync.Mutex
	byID map[string]weak.Pointer[baseListing]
}

func newListings() *listings { return &listings{byID: map[string]weak.Pointer[baseListing]{}} }

// get answers the listing of commit, made by list when no checkout holds
// it. Two first lists of one commit at once both run; the first stored is
// kept.
func (ls *listings) get(commit string, list func() (map[string]gitsvc.Entry, error)) (*baseListing, error) {
	id := commit
	ls.mu.Lock()
	l := ls.byID[id].Value()
	ls.mu.Unlock()
	if l != nil {
		return l, nil
	}
	entries, err := list()
	if err != nil {
		return nil, err
	}
	made := &baseListing{entries: entries}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byID[id].Value(); l != nil {
		return l, nil
	}
	ptr := weak.Make(made)
	ls.byID[id] = ptr
	// Once no checkout holds it, its key goes too (unless a newer
	// listing of the commit took the key meanwhile).
	runtime.AddCleanup(made, func(id string) {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ls.byID[id] == ptr {
			delete(ls.byID, id)
		}
	}, id)
	return made, nil
}
