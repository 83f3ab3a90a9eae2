//go:build linux

package inpod

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// manifestLineMax bounds one line of the manifest: a path and a link's
// target, each at most PATH_MAX, and the rest.
const manifestLineMax = 64 << 10

// errOverflow stops a walk at -max-entries.
var errOverflow = errors.New("inpod: changes: too many entries")

type changesOptions struct {
	root                 string
	maxDepth, maxEntries int
	maxFile, maxBytes    int64
	known                bool
	// Digests (SHA-256, hex) of the manifest and known sections, when the
	// server would rather not send them again: the container's main
	// process may hold them from an earlier capture.
	manifestDigest, knownDigest string
}

func changesVerb(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("changes", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var o changesOptions
	flags.StringVar(&o.root, "root", "/workspace", "the workspace")
	flags.IntVar(&o.maxDepth, "max-depth", 64, "folders at this depth are not entered")
	flags.IntVar(&o.maxEntries, "max-entries", 100000, "entries reported at most")
	flags.Int64Var(&o.maxFile, "max-file", 1<<20, "bytes of one file's content sent at most")
	flags.Int64Var(&o.maxBytes, "max-bytes", 64<<20, "bytes of content sent at most")
	flags.BoolVar(&o.known, "known", false, "the manifest is followed by the files the server has met as they were")
	flags.StringVar(&o.manifestDigest, "manifest-digest", "", "the manifest section's SHA-256: sent only when the container's main process does not hold it")
	flags.StringVar(&o.knownDigest, "known-digest", "", "the known section's SHA-256, likewise")
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%w: changes: unexpected %q", ErrBadArgs, flags.Arg(0))
	}
	if o.maxDepth < 1 || o.maxEntries < 1 || o.maxFile < 0 || o.maxBytes < 0 {
		return fmt.Errorf("%w: changes: bounds must be positive", ErrBadArgs)
	}
	fw := newFrameWriter(stdout, false)
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), manifestLineMax)
	w := &walker{opt: o, fw: fw, in: in, budget: o.maxBytes, seen: map[string]bool{}, closed: map[string]bool{}, pruned: map[string]bool{}, rootfd: -1}
	defer func() {
		if w.rootfd >= 0 {
			unix.Close(w.rootfd)
		}
	}()
	err := w.readSections(in)
	if err == nil {
		err = w.walk()
	}
	if err == nil {
		err = w.ask() // the last batch
	}
	if err != nil {
		w.st.Error = err.Error()
	}
	if err := fw.json(FrameStatus, w.st); err != nil {
		return err
	}
	return fw.flush()
}

// readSections reads the manifest and, with -known, the known files:
// from the container's main process when it holds a section by its
// digest, else from the server's input, which it then hands the main
// process for the next capture (once its digest matches). With digests,
// the first frame tells the server which sections to send.
func (w *walker) readSections(in *bufio.Scanner) error {
	var held [2][]byte
	if w.opt.manifestDigest != "" || w.opt.knownDigest != "" {
		var need []byte
		if held[0] = heldSection(w.opt.manifestDigest); held[0] == nil && w.opt.manifestDigest != "" {
			need = append(need, 'm')
		}
		if w.opt.known {
			if held[1] = heldSection(w.opt.knownDigest); held[1] == nil && w.opt.knownDigest != "" {
				need = append(need, 'k')
			}
		}
		if err := w.fw.frame(FrameSections, need); err != nil {
			return err
		}
		if err := w.fw.flush(); err != nil {
			return err
		}
	}
	var err error
	w.manifest, err = readSection(in, held[0], w.opt.manifestDigest, readManifest)
	if err == nil && w.opt.known {
		w.known, err = readSection(in, held[1], w.opt.knownDigest, readKnown)
	}
	return err
}

// readSection reads one section with read: from held when the main
// process held it, else from in, keeping what it read to hand the main
// process under digest.
func readSection[T any](in *bufio.Scanner, held []byte, digest string, read func(*bufio.Scanner, *bytes.Buffer) (T, error)) (T, error) {
	if held != nil {
		sc := bufio.NewScanner(bytes.NewReader(held))
		sc.Buffer(make([]byte, 64<<10), manifestLineMax)
		return read(sc, nil)
	}
	var raw *bytes.Buffer
	if digest != "" {
		raw = new(bytes.Buffer)
	}
	v, err := read(in, raw)
	if err == nil && raw != nil && SectionDigest(raw.Bytes()) == digest {
		holdSection(digest, raw.Bytes())
	}
	return v, err
}

// readManifest reads a section of the server's input, JSON lines of
// Entry, up to the end of the input or an empty line: a server that
// cannot close the helper's input (Kubernetes exec over WebSocket v4)
// ends it so. raw, when not nil, gets the section's bytes.
func readManifest(sc *bufio.Scanner, raw *bytes.Buffer) (map[string]Entry, error) {
	m := make(map[string]Entry)
	for sc.Scan() {
		keep(raw, sc.Bytes())
		if len(sc.Bytes()) == 0 {
			return m, nil
		}
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("inpod: changes: read manifest: %w", err)
		}
		if e.Kind != KindWhiteout { // what unpack removed is no path
			m[e.Path] = e
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("inpod: changes: read manifest: %w", err)
	}
	return m, nil
}

// knownFile is a line of the known section, and its number.
type knownFile struct {
	Entry
	line int
}

// keep appends a section's line to raw.
func keep(raw *bytes.Buffer, line []byte) {
	if raw != nil {
		raw.Write(line)
		raw.WriteByte('\n')
	}
}

// readKnown reads the known section (lines of AppendKnown): files the
// server has met as they were, by their number in it.
func readKnown(sc *bufio.Scanner, raw *bytes.Buffer) (map[string]knownFile, error) {
	m := make(map[string]knownFile)
	for line := 0; sc.Scan(); line++ {
		keep(raw, sc.Bytes())
		if len(sc.Bytes()) == 0 {
			return m, nil
		}
		e, err := ParseKnown(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("inpod: changes: read known files: %w", err)
		}
		m[e.Path] = knownFile{e, line}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("inpod: changes: read known files: %w", err)
	}
	return m, nil
}

// walker reports what differs between the tree and the manifest. It goes
// through descriptors, one folder at a time, so that no link is followed
// whatever the session's code swaps in meanwhile.
//
// It sends no content ahead: every AskBatch entries, and at the end, it
// asks, and the server reads the files it wants of the batch. A capture
// reads few of the files it meets (one it met unchanged before, or a new
// one with the session's paths full, it does not read at all), so what
// crosses the exec stream is what it reads.
type walker struct {
	opt      changesOptions
	fw       *frameWriter
	in       *bufio.Scanner // the server's input: after the manifest, its requests
	manifest map[string]Entry
	known    map[string]knownFile // files the server has met as they are: named by number
	seen     map[string]bool      // manifest paths met
	closed   map[string]bool      // folders not entered: what the manifest has below them is unknown
	pruned   map[string]bool      // folders the server passed over (AskSkip): the walk goes no further below them
	rootfd   int                  // the root, which requests' paths are beneath
	batch    []Entry              // the entries since the last ask, which requests name by position
	held     int                  // the batch's bytes of paths and link targets
	buf      []byte               // a file's content
	budget   int64                // bytes of content still to be sent
	st       ChangesStatus
}

func (w *walker) walk() error {
	fd, err := unix.Open(w.opt.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("inpod: changes: open %s: %w", w.opt.root, err)
	}
	if w.rootfd, err = unix.Dup(fd); err != nil {
		unix.Close(fd)
		return fmt.Errorf("inpod: changes: %w", err)
	}
	err = w.folder(fd, "", 0)
	if err == nil {
		err = w.whiteouts()
	}
	if errors.Is(err, errOverflow) {
		w.st.Overflow = true
		return nil
	}
	return err
}

// folder walks the open folder fd, at rel and depth, and closes it.
func (w *walker) folder(fd int, rel string, depth int) error {
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	for !w.prunedAt(rel) {
		names, err := f.Readdirnames(256)
		for _, name := range names {
			if err := w.entry(fd, rel, name, depth+1); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("inpod: changes: read folder %q: %w", rel, err)
		}
	}
	return nil
}

func (w *walker) entry(dirfd int, dir, name string, depth int) error {
	if !utf8.ValidString(name) {
		w.st.Skipped++
		return nil
	}
	rel := path.Join(dir, name)
	if w.prunedAt(dir) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone meanwhile
		}
		return fmt.Errorf("inpod: changes: stat %q: %w", rel, err)
	}
	e := entryOfUnix(rel, &st)
	if _, ok := w.manifest[rel]; ok {
		w.seen[rel] = true
	}
	switch e.Kind {
	case KindDir:
		if depth >= w.opt.maxDepth {
			e.TooDeep = true
			w.closed[rel] = true
			return w.report(e)
		}
		child, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			e.Unreadable = true
			w.closed[rel] = true
			return w.report(e)
		}
		if w.changed(e) {
			if err := w.report(e); err != nil {
				unix.Close(child)
				return err
			}
		}
		return w.folder(child, rel, depth)
	case KindLink:
		target, err := readlinkat(dirfd, name)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil // gone meanwhile
		case errors.Is(err, unix.EINVAL):
			// No longer a link: swapped while it was looked at. It is
			// reported as what a capture leaves out, and the next walk
			// sees what it has become.
			e.Kind, e.Size, e.Mode = KindOther, 0, 0
			return w.report(e)
		case err != nil:
			return fmt.Errorf("inpod: changes: read link %q: %w", rel, err)
		}
		e.Target = target
	case KindFile:
		if !w.changed(e) {
			return nil
		}
		if k, ok := w.known[e.Path]; ok && sameFile(&k.Entry, e) {
			return w.reportKnown(k)
		}
	}
	if w.changed(e) {
		return w.report(e)
	}
	return nil
}

// send answers AskRead for e: the file at its path as it is now, with
// its content when the bounds allow. It opens it beneath the root without
// following a link or waiting on a FIFO, and sends the content only when
// the file it read is regular and did not change while it read it. A
// path where no file can be opened (gone, or swapped for a link) is a
// whiteout: the next walk sees what is there.
func (w *walker) send(e Entry) error {
	fd, err := openBeneath(w.rootfd, e.Path)
	if err != nil {
		return w.answer(&Entry{Path: e.Path, Kind: KindWhiteout}, nil)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return w.answer(&Entry{Path: e.Path, Kind: KindWhiteout}, nil)
	}
	now := entryOfUnix(e.Path, &st)
	if now.Kind != KindFile || now.Size > w.opt.maxFile || now.Size > w.budget {
		return w.answer(now, nil)
	}
	if int64(cap(w.buf)) < now.Size {
		w.buf = make([]byte, now.Size)
	}
	buf := w.buf[:now.Size]
	if buf == nil {
		buf = []byte{} // an empty file's content, which answer tells from none
	}
	if n, err := readFull(fd, buf); err != nil || n != len(buf) {
		return w.answer(now, nil)
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil || after.Ctim != st.Ctim || after.Size != st.Size {
		return w.answer(now, nil)
	}
	w.budget -= now.Size
	return w.answer(now, buf)
}

// openBeneath opens the file at rel below rootfd, a folder at a time,
// following no link: rel is a path the walk met, and the session's code
// may have swapped any part of it since.
func openBeneath(rootfd int, rel string) (int, error) {
	dirfd := rootfd
	defer func() {
		if dirfd != rootfd {
			unix.Close(dirfd)
		}
	}()
	names := strings.Split(rel, "/")
	for _, name := range names[:len(names)-1] {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		if dirfd != rootfd {
			unix.Close(dirfd)
		}
		dirfd = fd
	}
	return unix.Openat(dirfd, names[len(names)-1], unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// readFull reads into buf until it is full or the file ends.
func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// changed says whether e differs from what the manifest holds at its path.
func (w *walker) changed(e *Entry) bool {
	m, ok := w.manifest[e.Path]
	if !ok || m.Kind != e.Kind {
		return true
	}
	switch e.Kind {
	case KindFile:
		return !sameFile(&m, e)
	case KindDir:
		return m.Mode != e.Mode
	case KindLink:
		return m.Target != e.Target
	}
	return m.Ino != e.Ino || m.CtimeNs != e.CtimeNs
}

// sameFile says whether two entries of regular files have one content:
// the kernel sets ctime at every change, and the user cannot set it back.
func sameFile(a, b *Entry) bool {
	return a.Ino == b.Ino && a.CtimeNs == b.CtimeNs && a.Size == b.Size && a.Mode == b.Mode
}

// report sends e, without content, into the batch.
func (w *walker) report(e *Entry) error {
	if w.st.Entries >= w.opt.maxEntries {
		return errOverflow
	}
	w.st.Entries++
	if err := w.fw.json(FrameEntry, e); err != nil {
		return err
	}
	return w.batched(*e)
}

// reportKnown says the file of k's line of the known section is as it says.
func (w *walker) reportKnown(k knownFile) error {
	if w.st.Entries >= w.opt.maxEntries {
		return errOverflow
	}
	w.st.Entries++
	if err := w.fw.frame(FrameKnown, strconv.AppendInt(nil, int64(k.line), 10)); err != nil {
		return err
	}
	return w.batched(k.Entry)
}

// batched adds e to the batch, and asks once the batch is full.
func (w *walker) batched(e Entry) error {
	w.batch = append(w.batch, e)
	w.held += len(e.Path) + len(e.Target)
	if len(w.batch) < AskBatch && w.held < AskBatchBytes {
		return nil
	}
	return w.ask()
}

// ask ends the batch: it waits for the server's requests and answers each
// until the server lets the walk go on.
func (w *walker) ask() error {
	if len(w.batch) == 0 {
		return nil
	}
	if err := w.fw.frame(FrameAsk, nil); err != nil {
		return err
	}
	for {
		if err := w.fw.flush(); err != nil {
			return err
		}
		if !w.in.Scan() {
			return fmt.Errorf("inpod: changes: the server's requests ended: %v", w.in.Err())
		}
		line := w.in.Text()
		if line == AskGoOn {
			w.batch, w.held = w.batch[:0], 0
			return nil
		}
		if quoted, ok := strings.CutPrefix(line, AskSkip); ok {
			p, err := strconv.Unquote(quoted)
			if err == nil {
				p, err = cleanRel(p)
			}
			if err != nil || p == "." {
				return fmt.Errorf("%w: changes: request %.40q", ErrBadArgs, line)
			}
			w.pruned[p], w.closed[p] = true, true
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(line, AskRead))
		if !strings.HasPrefix(line, AskRead) || err != nil || n < 0 || n >= len(w.batch) {
			return fmt.Errorf("%w: changes: request %.40q", ErrBadArgs, line)
		}
		if err := w.send(w.batch[n]); err != nil {
			return err
		}
	}
}

// prunedAt says whether the folder dir is, or lies below, one the server
// passed over.
func (w *walker) prunedAt(dir string) bool {
	if len(w.pruned) == 0 {
		return false
	}
	for d := dir; d != "" && d != "." && d != "/"; d = path.Dir(d) {
		if w.pruned[d] {
			return true
		}
	}
	return false
}

// answer sends e, the answer to a request, and content when not nil.
func (w *walker) answer(e *Entry, content []byte) error {
	e.Content = content != nil
	if err := w.fw.json(FrameEntry, e); err != nil {
		return err
	}
	return w.fw.chunks(FrameContent, content)
}

// whiteouts reports the manifest's paths that are gone, but not those
// below a folder that is gone too, nor those below a folder not entered.
func (w *walker) whiteouts() error {
	var gone []string
	for p := range w.manifest {
		if !w.seen[p] && p != "" && p != "." && !w.hidden(p) {
			gone = append(gone, p)
		}
	}
	slices.Sort(gone)
	for _, p := range gone {
		if err := w.report(&Entry{Path: p, Kind: KindWhiteout}); err != nil {
			return err
		}
	}
	return nil
}

// hidden says whether p lies below a folder that was not entered, or
// below one of the manifest's folders that is gone.
func (w *walker) hidden(p string) bool {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if w.closed[d] {
			return true
		}
		if _, ok := w.manifest[d]; ok && !w.seen[d] {
			return true
		}
	}
	return false
}

func entryOfUnix(name string, st *unix.Stat_t) *Entry {
	return entryOf(name, st.Mode, st.Ino, st.Size, st.Ctim.Nano(), st.Mtim.Nano())
}

// readlinkat reads a link's target, growing its buffer for a long one.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
