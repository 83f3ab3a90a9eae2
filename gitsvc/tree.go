package gitsvc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"atelier/fault"
)

// Entry is one entry of a tree.
type Entry struct {
	Mode string // "100644", "100755", "120000" (symlink), "040000", "160000" (submodule)
	Type string // blob, tree or commit (a submodule)
	SHA  string
	Size int64  // -1 for trees and submodules
	Path string // from the root for ListAll; the name alone for List
}

// ListAll lists every entry of commit's tree, folders included, with one
// ls-tree process for the whole tree (and one rev-parse for its root).
func (s *Service) ListAll(ctx context.Context, r *Repo, commit string) (rootTree string, entries []Entry, err error) {
	spec, err := treePath(commit, "", true)
	if err != nil {
		return "", nil, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return "", nil, err
	}
	defer release()
	tree, err := s.resolve(ctx, r, spec)
	if err != nil {
		return "", nil, err
	}
	c := newCommand("ls-tree", "-r", "-t", "-l", "--full-tree", "-z", "--end-of-options").val(tree)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if err != nil {
		return "", nil, err
	}
	entries, err = parseTree(out)
	if err != nil {
		return "", nil, err
	}
	return tree, entries, nil
}

// Paths lists the path of every entry of commit's tree, folders included,
// without looking at any object's size: cheaper than ListAll where only
// the names matter.
func (s *Service) Paths(ctx context.Context, r *Repo, commit string) ([]string, error) {
	spec, err := treePath(commit, "", true)
	if err != nil {
		return nil, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return nil, err
	}
	defer release()
	c := newCommand("ls-tree", "-r", "-t", "--name-only", "--full-tree", "-z", "--end-of-options").val(spec)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if err != nil {
		return nil, err
	}
	paths := strings.Split(string(out), "\x00")
	return paths[:len(paths)-1], nil // the output ends in NUL
}

// List lists one level of dir in commit ("" is the root). A dir that is
// missing, or is a file, is ErrNotFound.
func (s *Service) List(ctx context.Context, r *Repo, commit, dir string) ([]Entry, error) {
	spec, err := treePath(commit, dir, true)
	if err != nil {
		return nil, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return nil, err
	}
	defer release()
	c := newCommand("ls-tree", "-l", "-z", "--end-of-options").val(spec)
	out, err := s.run(ctx, c, runOpts{repo: r})
	if exitCode(err) == 128 {
		if msg := stderrOf(err); strings.Contains(msg, "Not a valid object name") || strings.Contains(msg, "not a tree object") {
			return nil, fmt.Errorf("gitsvc: list %q: %w: %w", dir, ErrNotFound, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return parseTree(out)
}

// ReadBlob returns the content of the file at path in commit and its size.
// A missing path (or a submodule, whose commit is not in this repository) is
// ErrNotFound; a folder is ErrNotBlob. The
// whole file is read into memory, up to Config.MaxOutput.
func (s *Service) ReadBlob(ctx context.Context, r *Repo, commit, path string) ([]byte, int64, error) {
	spec, err := treePath(commit, path, false)
	if err != nil {
		return nil, 0, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return nil, 0, err
	}
	defer release()
	// --batch with -z takes the name on stdin, NUL-terminated, so a path
	// may hold newlines; and it tells type and size with the content, in
	// one process.
	c := newCommand("cat-file", "--batch", "-z")
	out, err := s.run(ctx, c, runOpts{repo: r, stdin: strings.NewReader(spec + "\x00")})
	if err != nil {
		return nil, 0, err
	}
	header, body, _ := bytes.Cut(out, []byte("\n"))
	_, typ, size, ok := parseHeader(string(header))
	switch {
	case !ok: // "<name> missing": the header echoes the name, which we never parse
		return nil, 0, fmt.Errorf("gitsvc: read %q: %w", path, ErrNotFound)
	case typ != "blob":
		return nil, 0, fmt.Errorf("gitsvc: read %q: %w (a %s)", path, ErrNotBlob, typ)
	case int64(len(body)) != size+1:
		return nil, 0, fmt.Errorf("gitsvc: read %q: cat-file gave %d bytes for %d", path, len(body), size)
	}
	return body[:size], size, nil
}

// treePath is commit:path in git's revision syntax, checked: commit may not
// hold ':' or braces (so the path part cannot be read as part of it), and
// path must be a clean relative path. With root allowed, "" names the root
// tree.
func treePath(commit, path string, root bool) (string, error) {
	if err := checkValue(commit); err != nil {
		return "", err
	}
	if strings.ContainsAny(commit, ":{}\n") {
		return "", fault.Detailf(ErrBadArgument, ": revision %q", commit)
	}
	if path == "" && root {
		return commit + "^{tree}", nil
	}
	if err := checkPath(path); err != nil {
		return "", err
	}
	return commit + ":" + path, nil
}

// checkPath accepts a path relative to the root of a tree, with '/'
// separators and no empty, "." or ".." part. Any other byte but NUL is
// allowed: git stores such names. A name starting with '-' is fine too, as
// it only ever follows "<commit>:".
func checkPath(p string) error {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return fault.Detailf(ErrBadArgument, ": path %q", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fault.Detailf(ErrBadArgument, ": path %q", p)
		}
	}
	return nil
}

// parseTree reads `ls-tree -l -z` output: records of
// "<mode> SP <type> SP <object> SP+ <size>\t<path>" ending in NUL.
func parseTree(out []byte) ([]Entry, error) {
	entries := []Entry{}
	for len(out) > 0 {
		rec, rest, ok := bytes.Cut(out, []byte{0})
		if !ok {
			return nil, fmt.Errorf("gitsvc: ls-tree: unterminated record %q", rec)
		}
		out = rest
		meta, path, ok := bytes.Cut(rec, []byte{'\t'})
		f := strings.Fields(string(meta))
		if !ok || len(f) != 4 || len(path) == 0 {
			return nil, fmt.Errorf("gitsvc: ls-tree: bad record %q", rec)
		}
		e := Entry{Mode: f[0], Type: f[1], SHA: f[2], Size: -1, Path: string(path)}
		if f[3] != "-" {
			n, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("gitsvc: ls-tree: bad size in %q", rec)
			}
			e.Size = n
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// parseHeader reads cat-file's "<oid> <type> <size>" line.
func parseHeader(line string) (oid, typ string, size int64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || !isOID(f[0]) {
		return "", "", 0, false
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		return "", "", 0, false
	}
	return f[0], f[1], size, true
}

// readObject reads the content of size bytes that cat-file --batch announced,
// and the newline after it.
func readObject(br *bufio.Reader, size, max int64) ([]byte, error) {
	if size > max {
		return nil, fmt.Errorf("object of %d bytes is over the limit of %d", size, max)
	}
	data := make([]byte, size+1)
	if _, err := io.ReadFull(br, data); err != nil {
		return nil, err
	}
	if data[size] != '\n' {
		return nil, fmt.Errorf("object not followed by a newline")
	}
	return data[:size], nil
}

// TreeBytes is the size of the files of rev's tree (a commit or a tree),
// each path counted as a checkout holds it, links by their target's length.
// One ls-tree streams the sizes alone and they are summed as they come, so
// a tree of any number of files costs a buffer.
func (s *Service) TreeBytes(ctx context.Context, r *Repo, rev string) (int64, error) {
	spec, err := treePath(rev, "", true)
	if err != nil {
		return 0, err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return 0, err
	}
	defer release()
	sum := &sizeSum{}
	c := newCommand("ls-tree", "-r", "-z", "--format=%(objecttype) %(objectsize)", "--end-of-options").val(spec)
	if _, err := s.run(ctx, c, runOpts{repo: r, stdout: sum}); err != nil {
		return 0, err
	}
	if sum.err != nil || len(sum.rest) > 0 {
		return 0, fmt.Errorf("gitsvc: ls-tree sizes: %v (left %q)", sum.err, sum.rest)
	}
	return sum.n, nil
}

// sizeSum adds up "<type> <size>" records ending in NUL as they are
// written; records of submodules (commit objects) count nothing.
type sizeSum struct {
	n    int64
	rest []byte // an unfinished record
	err  error
}

func (w *sizeSum) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	buf := append(w.rest, p...)
	for {
		rec, rest, ok := bytes.Cut(buf, []byte{0})
		if !ok {
			break
		}
		buf = rest
		typ, size, _ := strings.Cut(string(rec), " ")
		if typ != "blob" {
			continue
		}
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n < 0 {
			w.err = fmt.Errorf("bad record %q", rec)
			return 0, w.err
		}
		w.n += n
	}
	w.rest = append(w.rest[:0], buf...)
	return len(p), nil
}
