package gitsvc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"atelier/fault"
)

// Modes of the entries BuildTree writes: git's own, nothing else.
const (
	modeFile       = 0o100644
	modeExecutable = 0o100755
	modeLink       = 0o120000
)

// TreeBuilder receives the files and links of the tree BuildTree writes.
// Contents go to git as they are read; nothing lands in a work tree, so
// nothing a link says is ever followed.
type TreeBuilder struct {
	out     *bufio.Writer
	blobs   int // fast-import marks given so far, one per blob
	entries []builtEntry
	kinds   map[string]bool // path → is a folder; leaves (files, links) are false
}

type builtEntry struct {
	mode int
	path string
	blob Blob
}

// Blob is content written into git by TreeBuilder.Blob, not yet in the
// tree: Place puts it at a path. Its number is the blob's fast-import mark.
type Blob int

// File adds the regular file at path with exactly size bytes read from
// content. A content that ends early fails the whole build.
func (b *TreeBuilder) File(path string, executable bool, size int64, content io.Reader) error {
	blob := Blob(b.blobs + 1)
	if err := b.add(path, fileMode(executable), blob); err != nil {
		return err
	}
	_, err := b.Blob(size, content)
	return err
}

// Blob writes exactly size bytes read from content into git and answers
// the blob, for a caller that learns where a file goes only after its
// content has gone by (a tar, checked as a whole once read). A blob never
// placed is in no tree; BuildTree's failure removes it with the rest.
func (b *TreeBuilder) Blob(size int64, content io.Reader) (Blob, error) {
	if size < 0 {
		return 0, fault.Detailf(ErrBadArgument, ": negative size")
	}
	b.blobs++
	fmt.Fprintf(b.out, "blob\nmark :%d\ndata %d\n", b.blobs, size)
	n, err := io.CopyN(b.out, content, size)
	if err != nil {
		return 0, fmt.Errorf("gitsvc: build tree: blob %d: %d of %d bytes: %w", b.blobs, n, size, err)
	}
	_, err = b.out.WriteString("\n")
	return Blob(b.blobs), err
}

// Place adds the regular file at path whose content is blob, one that
// Blob answered.
func (b *TreeBuilder) Place(path string, executable bool, blob Blob) error {
	if blob < 1 || int(blob) > b.blobs {
		return fault.Detailf(ErrBadArgument, ": %q: no such blob", path)
	}
	return b.add(path, fileMode(executable), blob)
}

func fileMode(executable bool) int {
	if executable {
		return modeExecutable
	}
	return modeFile
}

// Link adds a symbolic link at path whose text is target. Where it points
// is the caller's rule; here it must only be a link's text.
func (b *TreeBuilder) Link(path, target string) error {
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return fault.Detailf(ErrBadArgument, ": link %q: empty target or NUL byte", path)
	}
	if err := b.add(path, modeLink, Blob(b.blobs+1)); err != nil {
		return err
	}
	b.blobs++
	_, err := fmt.Fprintf(b.out, "blob\nmark :%d\ndata %d\n%s\n", b.blobs, len(target), target)
	return err
}

// add records path as a leaf after checking it fits the tree so far: a
// clean relative path, no .git, named once, below no file or link and not
// on a folder. git's index would quietly drop .git paths and replace a file
// by a folder of the same name; here both are errors.
func (b *TreeBuilder) add(path string, mode int, blob Blob) error {
	bad := func(why string) error { return fault.Detailf(ErrBadArgument, ": tree path %q: %s", path, why) }
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return bad("empty or holds a NUL byte")
	}
	parts := strings.Split(path, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.EqualFold(p, ".git") {
			return bad("not a clean relative path")
		}
	}
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		if isDir, seen := b.kinds[dir]; seen && !isDir {
			return bad("below a file or link")
		}
		b.kinds[dir] = true
	}
	if _, seen := b.kinds[path]; seen {
		return bad("named twice or already a folder")
	}
	b.kinds[path] = false
	b.entries = append(b.entries, builtEntry{mode: mode, path: path, blob: blob})
	return nil
}

// BuildTree writes a tree into r from the files and links add gives the
// builder, under r's write lock, and returns its hash. Contents stream into
// `git fast-import` as blobs; the tree is then made from a temporary index.
// Nothing is committed: pass the tree to CommitWithParents. add runs on
// another goroutine and may use the builder only until it returns. When it
// fails, git is killed before it sees the end of its input, so no tree is
// made, and the pack it was writing is removed: a refused import leaves
// no objects behind.
func (s *Service) BuildTree(ctx context.Context, r *Repo, add func(*TreeBuilder) error) (string, error) {
	release, err := s.rlock(ctx, r, true)
	if err != nil {
		return "", err
	}
	defer release()
	tmp, err := os.MkdirTemp(s.tmp, "build-")
	if err != nil {
		return "", fmt.Errorf("gitsvc: build tree: %w", err)
	}
	defer os.RemoveAll(tmp)
	marks := filepath.Join(tmp, "marks")

	packs := filepath.Join(r.GitDir, "objects", "pack")
	before, err := packNames(packs)
	if err != nil {
		return "", err
	}
	b := &TreeBuilder{kinds: map[string]bool{}}
	if err := s.importBlobs(ctx, r, marks, b, add); err != nil {
		if cerr := removeNewPacks(packs, before); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return "", err
	}
	oids, err := readMarks(marks, b.blobs)
	if err != nil {
		return "", err
	}
	var index strings.Builder
	for _, e := range b.entries {
		fmt.Fprintf(&index, "%o %s\t%s\x00", e.mode, oids[e.blob-1], e.path)
	}
	o := runOpts{repo: r, env: []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}}
	o.stdin = strings.NewReader(index.String())
	if _, err := s.run(ctx, newCommand("update-index", "-z", "--index-info"), o); err != nil {
		return "", err
	}
	o.stdin = nil
	out, err := s.run(ctx, newCommand("write-tree"), o)
	if err != nil {
		return "", err
	}
	tree := strings.TrimSpace(string(out))
	if !isOID(tree) {
		return "", fmt.Errorf("gitsvc: write-tree: unexpected output %q", out)
	}
	return tree, nil
}

// buildTimeout bounds the fast-import of one BuildTree. It takes as long
// as its input, which can be gigabytes (an import's archive may unpack to
// 2 GiB) and runs at the disk's pace, so the per-process timeout meant for
// quick commands would cut a large import short; the caller's context ends
// it when the request goes away.
const buildTimeout = StreamTimeout

// importBlobs runs fast-import with add feeding it through a pipe. The pipe
// is an *os.File so git reads it directly; on a failure of add the process
// is killed before its input ends, so git never takes a cut stream for a
// whole one (nor writes a crash report into the repository).
func (s *Service) importBlobs(ctx context.Context, r *Repo, marks string, b *TreeBuilder, add func(*TreeBuilder) error) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("gitsvc: build tree: %w", err)
	}
	defer pr.Close()
	defer pw.Close()
	fctx, kill := context.WithCancel(ctx)
	defer kill()

	fed := make(chan error, 1)
	go func() {
		b.out = bufio.NewWriterSize(pw, 256<<10)
		err := add(b)
		if err == nil {
			_, err = b.out.WriteString("done\n")
		}
		if err == nil {
			err = b.out.Flush()
		}
		if err != nil {
			kill()
			fed <- err
			return
		}
		fed <- pw.Close()
	}()
	c := newCommand("fast-import", "--quiet", "--done").lit(lit("--export-marks=" + marks))
	_, runErr := s.run(fctx, c, runOpts{repo: r, stdin: pr, timeout: buildTimeout})
	// git is gone: a feeder still writing gets EPIPE instead of waiting
	// on a pipe nobody reads, and git's own failure is the one to tell.
	pr.Close()
	feedErr := <-fed
	switch {
	case feedErr != nil && runErr != nil && errors.Is(feedErr, syscall.EPIPE):
		return runErr
	case feedErr != nil:
		return feedErr
	}
	return runErr
}

// packNames lists the repository's pack folder.
func packNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("gitsvc: build tree: %w", err)
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

// removeNewPacks removes what a failed fast-import left in the pack
// folder: its tmp_pack_ file, or a whole pack when it had finished. Both
// are its own: BuildTree holds the repository's write lock, and
// fast-import writes only objects the repository lacks, so nothing else
// can refer to them. (A fast-import of fewer than 100 objects that
// succeeded loosens them instead; BuildTree fails after that only on I/O
// errors, and those loose objects stay for git's gc.)
func removeNewPacks(dir string, before map[string]bool) error {
	now, err := packNames(dir)
	if err != nil {
		return err
	}
	var errs []error
	for name := range now {
		if !before[name] {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("gitsvc: build tree: remove %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// readMarks reads fast-import's marks file: ":<n> <oid>" for marks 1..n.
func readMarks(name string, n int) ([]string, error) {
	data, err := os.ReadFile(name)
	if err != nil && !(n == 0 && errors.Is(err, os.ErrNotExist)) {
		return nil, fmt.Errorf("gitsvc: build tree: marks: %w", err)
	}
	oids := make([]string, n)
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		mark, oid, ok := strings.Cut(line, " ")
		i, err := strconv.Atoi(strings.TrimPrefix(mark, ":"))
		if !ok || err != nil || i < 1 || i > n || !isOID(oid) {
			return nil, fmt.Errorf("gitsvc: build tree: bad marks line %q", line)
		}
		oids[i-1] = oid
	}
	for i, oid := range oids {
		if oid == "" {
			return nil, fmt.Errorf("gitsvc: build tree: no object for mark %d", i+1)
		}
	}
	return oids, nil
}
