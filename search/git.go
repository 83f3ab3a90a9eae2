package search

import (
	"context"
	"strings"

	"atelier/gitsvc"
	"atelier/storage/codestore"
)

// Git is the source of src's tree, read by git grep. Paths skip names are
// left out (a session's edited and deleted files); extra, files matched
// elsewhere and sorted by path (a session's edits), are merged in, so the
// whole stays in path order. A file over MaxFileBytes is passed over: its
// size comes from the code store's listing of its folder, read once per
// folder that has a match.
func Git(git *gitsvc.Service, store *codestore.Store, src codestore.Source, skip func(string) bool, extra []File) Source {
	return func(ctx context.Context, m *Matcher, emit func(File) error) error {
		merged := func(f File) error {
			for len(extra) > 0 && extra[0].Path < f.Path {
				if err := emit(extra[0]); err != nil {
					return err
				}
				extra = extra[1:]
			}
			return emit(f)
		}
		if !m.lits.none {
			g := &grepFiles{m: m, ctx: ctx, store: store, src: src, skip: skip, emit: merged}
			o := gitsvc.GrepOptions{Fixed: m.lits.set, IgnoreCase: m.lits.fold, MaxLine: MaxFileBytes, Timeout: Timeout, Read: g.flush}
			err := git.Grep(ctx, src.Repo, src.Commit, o, g.line)
			if err == nil && g.err == nil {
				err = g.flush()
			}
			if g.err != nil {
				return g.err
			}
			if err != nil {
				return err
			}
		}
		for _, f := range extra {
			if err := emit(f); err != nil {
				return err
			}
		}
		return nil
	}
}

// grepFiles gathers git's lines into files and hands them on: when a new
// file begins and whenever git's output so far has been read (so a person
// sees the first file at once, though git may be long in writing the
// next); a file handed on in pieces comes as consecutive Files of the same
// path.
type grepFiles struct {
	m     *Matcher
	ctx   context.Context
	store *codestore.Store
	src   codestore.Source
	skip  func(string) bool
	emit  func(File) error

	path    string
	passed  bool // the current file is left out
	taken   int  // its matching lines so far
	pending File
	err     error // emit's, which stopped git

	dir     string // the folder listed last, and its entries
	entries []codestore.Entry
}

func (g *grepFiles) line(l gitsvc.GrepLine) error {
	if l.Path != g.path {
		if err := g.flush(); err != nil {
			return err
		}
		g.path, g.taken = l.Path, 0
		g.pending = File{Path: l.Path}
		passed, err := g.pass(l.Path)
		if err != nil {
			return err
		}
		g.passed = passed
	}
	if g.passed || g.pending.More {
		return nil
	}
	if l.Long { // a line over MaxFileBytes: the file is larger still
		g.passed = true
		g.pending.Lines = nil
		return nil
	}
	found, ok := g.m.line(l.Line, l.Text)
	if !ok {
		return nil
	}
	if g.taken == MaxPerFile {
		g.pending.More = true
		return nil
	}
	g.taken++
	g.pending.Lines = append(g.pending.Lines, found)
	return nil
}

// flush hands on what the current file has gathered.
func (g *grepFiles) flush() error {
	if g.passed || len(g.pending.Lines) == 0 && !g.pending.More {
		return nil
	}
	f := g.pending
	g.pending = File{Path: f.Path}
	if f.More {
		g.passed = true // nothing more of this file is shown
	}
	if err := g.emit(f); err != nil {
		g.err = err // carried out past git, which stops
		return gitsvc.ErrStopGrep
	}
	return nil
}

// pass says whether a file is left out: skipped by the caller, or too
// large.
func (g *grepFiles) pass(path string) (bool, error) {
	if g.skip != nil && g.skip(path) {
		return true, nil
	}
	dir, name := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, name = path[:i], path[i+1:]
	}
	if g.entries == nil || dir != g.dir {
		es, err := g.store.List(g.ctx, g.src, dir)
		if err != nil {
			return false, err
		}
		g.dir, g.entries = dir, es
	}
	for _, e := range g.entries {
		if e.Name == name {
			return e.Size > MaxFileBytes, nil
		}
	}
	return true, nil // git named what the listing lacks: not a file to show
}
