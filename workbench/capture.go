package workbench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"atelier/editsession"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/sandbox"
	"atelier/workspace"
)

// What one capture may cost the server, whatever the session's code wrote
// into its checkout: the capture runs as root in the server's process, so
// its memory, descriptors and time are bounded by these and not by what it
// finds.
const (
	// DefaultCaptureBudget is how long a capture looks at the checkout
	// (Sandboxes.CaptureBudget). What it has not reached by then stays in
	// the checkout, unrecorded, and the command's answer says so; the next
	// capture looks again.
	DefaultCaptureBudget = 10 * time.Second
	// CaptureDepth is how deep a capture goes into folders. A deeper
	// folder stays out with a note; the bound is also the most descriptors
	// one capture holds.
	CaptureDepth = 64
	// captureHeld is how much content a capture holds before it writes it
	// to the database: a session's whole path limit of large files would
	// be 50 MiB.
	captureHeld = 4 << 20
	// captureBatch bounds the edits one write of a capture carries.
	captureBatch = 256
	// maxSeen bounds the files a checkout remembers between captures.
	maxSeen = 200_000
)

// seenFile is what a capture learned of a regular file, true while the
// file's metadata (its sandbox.FileStat) stays the same: its content's git
// blob id and digest, or why it cannot be an edit.
type seenFile struct {
	key  sandbox.FileStat
	blob string // git's blob id, to compare with the base
	sum  string // sha256, to compare with an edit (editVersion)
	why  string // left out, and why; blob and sum are then empty
}

// racyMargin: a file whose ctime is this close to (or after) the moment a
// capture began is read again by the next capture, as git treats a racily
// clean index entry. A write just after the reading could otherwise land
// in the same tick of the file system's clock, with the same ctime; a
// second covers file systems that keep whole seconds.
const racyMargin = time.Second

// deletedVersion is the version (editVersion) of a deletion.
const deletedVersion = "deleted"

// editVersion names what an edit makes of its path: deleted, or its
// content's sha256, which PostgreSQL keeps for every edit
// (content_sha256), so versions are compared without reading contents.
func editVersion(e *models.SessionFile) string {
	if e.Deleted {
		return deletedVersion
	}
	return contentSum(e.Content)
}

func storedVersion(v *models.SessionFileVersion) string {
	if v.Deleted {
		return deletedVersion
	}
	return hex.EncodeToString(v.SHA256)
}

func contentSum(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

// LeftOut is a path of the checkout that did not become an edit, and why.
type LeftOut struct {
	Path string
	Why  string
}

// Note is how the person reads it, after the command's output. A path
// with a character a terminal would act on or hide, or with a name that
// starts or ends with a space, is quoted.
func (l LeftOut) Note() string {
	p := l.Path
	if !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) ||
		strings.HasPrefix(p, " ") || strings.HasSuffix(p, " ") || strings.Contains(p, " /") || strings.Contains(p, "/ ") {
		p = strconv.QuoteToASCII(p)
	}
	return p + ": left out, " + l.Why
}

// captureReport is what a capture left out, as far as a person needs it:
// the first maxNotes paths, how many more there were, and whether the
// budget ran out.
type captureReport struct {
	left   []LeftOut
	more   int
	cut    bool
	budget time.Duration
}

func (rep *captureReport) leave(p, why string) {
	if len(rep.left) < maxNotes {
		rep.left = append(rep.left, LeftOut{Path: p, Why: why})
		return
	}
	rep.more++
}

// notes are the lines a command's answer carries.
func (rep *captureReport) notes() []string {
	notes := make([]string, 0, len(rep.left)+2)
	for _, l := range rep.left {
		notes = append(notes, l.Note())
	}
	if rep.more > 0 {
		notes = append(notes, fmt.Sprintf("and %d more left out", rep.more))
	}
	if rep.cut {
		notes = append(notes, fmt.Sprintf("the capture stopped after %v: what it did not look at stays in the checkout, and the next command looks again", rep.budget))
	}
	return notes
}

// Reasons a path stays out.
var (
	whyTooLarge   = "larger than " + strconv.Itoa(editsession.MaxFileBytes/1024) + " KiB"
	whyFull       = fmt.Sprintf("the session already changes %d paths", editsession.MaxPaths)
	whyFullFolder = "a folder of new files, with all it holds: " + whyFull
	whyTooDeep    = fmt.Sprintf("more than %d folders deep", CaptureDepth)
)

// pendingEdit is one edit a capture found and has not written yet.
type pendingEdit struct {
	path    string
	content []byte
	deleted bool
	forget  bool // the path is as the base has it again: its edit goes
}

func (pe *pendingEdit) version() string {
	if pe.deleted {
		return deletedVersion
	}
	return contentSum(pe.content)
}

// capturer is one capture of a checkout.
type capturer struct {
	ctx  context.Context
	r    *Runtime
	sess editsession.Identity
	co   *checkout
	base map[string]gitsvc.Entry
	// The budget counts from the walk's first entry: a provider that
	// must start something first (a pod's helper, through exec) gives
	// the capture as long to look as one that walks at once.
	budget   time.Duration
	deadline time.Time
	// seen is what the last capture learned, next what this one passes on.
	seen, next  map[string]seenFile
	trustBefore int64
	buf         []byte // one file's content, reused
	pending     []pendingEdit
	held        int
	// added counts the pending edits of paths the session did not change.
	added int
	// expect holds the paths whose absence from the walk means something:
	// hidden (true) ones are gone from the checkout unless the walk meets
	// them; the others then read as the base has them.
	expect map[string]bool
	// editFolders are the folders holding an edit's path.
	editFolders map[string]bool
	// unwalked are folders the walk did not enter: absence below them
	// says nothing.
	unwalked map[string]bool
	rep      captureReport
	// entries and filesRead count what the walk met and the files it read.
	entries, filesRead int
}

// capture turns every difference between the checkout and what it was
// last told (the session's edits as of the last sync or capture, and the
// base elsewhere) into an edit; what cannot be an edit stays out, and the
// report says why. A layered checkout is looked at through its upper
// folder alone, which holds just what was written and the marks of what
// was deleted; a plain one is walked whole.
//
// It costs what the limits allow, not what the session wrote: it never
// holds more than one file of content beyond captureHeld, stops reading
// new paths once the session's path limit is reached, remembers what it
// read and what it left out by each file's FileStat so the next capture
// does not read them again, holds at most CaptureDepth descriptors, and
// stops when its budget (Sandboxes.CaptureBudget), counted from the
// walk's first entry, runs out.
func (r *Runtime) capture(ctx context.Context, sess editsession.Identity, co *checkout) (*captureReport, error) {
	// Only the instance holding the session's runtime turns its files into
	// edits: one declared gone while a command ran here, whose claim
	// another instance took since, must not overwrite what that one
	// captures.
	if err := r.holdRuntime(ctx, sess.ID, co); err != nil {
		return nil, err
	}
	base, err := r.baseEntries(ctx, sess, co)
	if err != nil {
		return nil, err
	}
	budget := cmp.Or(r.sb.CaptureBudget, DefaultCaptureBudget)
	began := time.Now() // the kernel's clock, which stamps ctime
	c := &capturer{ctx: ctx, r: r, sess: sess, co: co, base: base, budget: budget,
		seen: co.seen, next: map[string]seenFile{}, trustBefore: began.Add(-racyMargin).UnixNano(),
		expect: map[string]bool{}, editFolders: map[string]bool{}, unwalked: map[string]bool{},
		rep: captureReport{budget: budget}}
	co.seen = nil // until this capture is done
	for p := range co.synced {
		c.expect[p] = !co.layered
		for d := parentDir(p); d != ""; d = parentDir(d) {
			c.editFolders[d] = true
		}
	}
	if !co.layered {
		for p, b := range base {
			if b.Type == "blob" {
				c.expect[p] = true
			}
		}
	}
	if err := r.sb.Provider.Changed(ctx, co.ref, CaptureDepth, c.visit); err != nil {
		return nil, fmt.Errorf("workbench: capture: %w", err)
	}
	if c.rep.cut {
		// What the walk did not reach this time is still known.
		for p, f := range c.seen {
			if _, ok := c.next[p]; !ok {
				c.remember(p, f)
			}
		}
	} else {
		for p, hidden := range c.expect {
			if !c.underUnwalked(p) {
				if err := c.absent(p, hidden); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := c.flush(); err != nil {
		return nil, err
	}
	co.seen = c.next
	r.log.Debug("capture", "session", sess.ID, "took", time.Since(began), "entries", c.entries, "read", c.filesRead,
		"left", len(c.rep.left)+c.rep.more, "cut", c.rep.cut)
	return &c.rep, nil
}

// holdRuntime claims the session's runtime for this instance, whose
// checkout co is; when another instance holds it now, co is stale and
// goes.
func (r *Runtime) holdRuntime(ctx context.Context, sessionID string, co *checkout) error {
	err := r.db.ClaimSessionRuntime(ctx, sessionID, r.sb.Instance)
	if errors.Is(err, models.ErrRuntimeElsewhere) {
		if ferr := r.forget(ctx, sessionID, co); ferr != nil {
			r.log.Warn("a stale checkout of a session another instance took not removed", "session", sessionID, "err", ferr)
		}
	}
	return err
}

// visit looks at one entry of the walk.
func (c *capturer) visit(e sandbox.Entry) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if now := time.Now(); c.deadline.IsZero() {
		c.deadline = now.Add(c.budget)
	} else if now.After(c.deadline) {
		c.rep.cut = true
		return fs.SkipAll
	}
	c.entries++
	p := e.Path
	if e.Kind == sandbox.KindWhiteout {
		// The mark of a deletion: of a file, or of a folder and all it held.
		if workspace.CheckRelPath(p) == nil {
			return c.goneWithAllBelow(p)
		}
		return nil
	}
	b, inBase := c.base[p]
	if inBase && b.Type == "commit" {
		return fs.SkipDir // a submodule's folder is not the session's to change
	}
	if _, told := c.co.synced[p]; !told && !inBase && c.full() && !c.holdsTold(p) {
		// Nothing of the base or the edits is here or below: a new path
		// with no room for it, not looked at any further.
		if e.Kind == sandbox.KindDir {
			c.rep.leave(p, whyFullFolder)
			return fs.SkipDir
		}
		c.rep.leave(p, whyFull)
		return nil
	}
	if workspace.CheckNewPath(p) != nil {
		c.rep.leave(p, "not a valid path")
		c.unwalked[p] = true
		return fs.SkipDir
	}
	delete(c.expect, p)
	switch e.Kind {
	case sandbox.KindDir:
		if err := c.gone(p); err != nil { // a file that became a folder
			return err
		}
		if e.TooDeep {
			c.rep.leave(p, whyTooDeep)
			c.unwalked[p] = true
			return fs.SkipDir
		}
		if e.Opaque {
			c.hideBelow(p) // the base's folder was replaced: only what the walk meets is there
		}
		return nil
	case sandbox.KindLink:
		if err := c.goneBelow(p); err != nil {
			return err
		}
		target, err := e.Look.Readlink()
		if errors.Is(err, syscall.EINVAL) {
			return nil // no longer a link: replaced meanwhile, as vanished says
		}
		if err != nil {
			return c.vanished(err)
		}
		// The base's own link, as it was, is no change; any other is noted.
		if b, ok := c.base[p]; !ok || b.Mode != "120000" || gitBlobID([]byte(target)) != b.SHA {
			c.rep.leave(p, "a symbolic link is not an edit")
		}
		return nil
	case sandbox.KindFile:
		if err := c.goneBelow(p); err != nil {
			return err
		}
		return c.file(e)
	}
	if err := c.goneBelow(p); err != nil {
		return err
	}
	c.rep.leave(p, "not a regular file")
	return nil
}

// file looks at a regular file: known by its FileStat, left out by its
// size, or read once, into one reused buffer.
func (c *capturer) file(e sandbox.Entry) error {
	p := e.Path
	key, err := e.Look.Stat()
	if err != nil {
		return c.vanished(err)
	}
	if !key.Regular {
		c.rep.leave(p, "not a regular file")
		return nil
	}
	if prev, ok := c.seen[p]; ok && prev.key == key {
		c.remember(p, prev)
		if prev.why != "" {
			c.rep.leave(p, prev.why)
			return nil
		}
		return c.decide(e, prev, nil)
	}
	if key.Size > editsession.MaxFileBytes {
		c.remember(p, seenFile{key: key, why: whyTooLarge})
		c.rep.leave(p, whyTooLarge)
		return nil
	}
	if _, told := c.co.synced[p]; !told && c.full() && c.changedBySize(p, key.Size) {
		c.rep.leave(p, whyFull) // a new path, with no room for it: not read
		return nil
	}
	content, f, err := c.read(e)
	if err != nil {
		return c.vanished(err)
	}
	if f.key.CtimeNsec < c.trustBefore {
		c.remember(p, f)
	}
	if f.why != "" {
		c.rep.leave(p, f.why)
		return nil
	}
	return c.decide(e, f, content)
}

// decide records the file f at e's path when it differs from what the
// checkout was told. content is nil when f is known by its statKey; it is
// read then only if it must be recorded.
func (c *capturer) decide(e sandbox.Entry, f seenFile, content []byte) error {
	p := e.Path
	version, told := c.co.synced[p]
	b, inBase := c.base[p]
	asBase := inBase && isBaseText(b) && b.SHA == f.blob
	switch {
	case told && version == f.sum, !told && asBase:
		return nil // as the checkout was told
	case asBase:
		return c.add(pendingEdit{path: p, forget: true})
	case !told && c.full():
		c.rep.leave(p, whyFull)
		return nil
	}
	if content == nil {
		var err error
		if content, f, err = c.read(e); err != nil {
			return c.vanished(err)
		}
		if f.why != "" { // changed since it was last read
			c.rep.leave(p, f.why)
			return nil
		}
	}
	return c.add(pendingEdit{path: p, content: bytes.Clone(content)})
}

// read reads a file of at most editsession.MaxFileBytes that is text into c.buf, or
// says why it cannot be an edit; the key is the file's as it was read.
func (c *capturer) read(e sandbox.Entry) ([]byte, seenFile, error) {
	if c.buf == nil {
		c.buf = make([]byte, editsession.MaxFileBytes+1)
	}
	n, st, err := e.Look.ReadFile(c.buf)
	if err != nil {
		return nil, seenFile{}, err
	}
	f := seenFile{key: st}
	switch {
	case !st.Regular:
		f.why = "not a regular file"
		return nil, f, nil
	case st.Size > editsession.MaxFileBytes:
		f.why = whyTooLarge
		return nil, f, nil
	}
	c.filesRead++
	content := c.buf[:n]
	switch {
	case n > editsession.MaxFileBytes:
		f.why = whyTooLarge
		return nil, f, nil
	case bytes.IndexByte(content, 0) >= 0:
		f.why = "a binary file"
		return nil, f, nil
	}
	f.blob, f.sum = gitBlobID(content), contentSum(content)
	return content, f, nil
}

// vanished passes over an entry a shell of the session removed or
// replaced while the capture looked: the next capture sees what it became.
func (c *capturer) vanished(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) ||
		errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.EAGAIN) {
		return nil
	}
	return err
}

func (c *capturer) remember(p string, f seenFile) {
	if len(c.next) < maxSeen {
		c.next[p] = f
	}
}

// full says the session changes as many paths as it may, counting those
// this capture is about to add.
func (c *capturer) full() bool { return len(c.co.synced)+c.added >= editsession.MaxPaths }

// changedBySize says a file of size at p differs from the base without
// reading it.
func (c *capturer) changedBySize(p string, size int64) bool {
	b, ok := c.base[p]
	return !ok || !isBaseText(b) || b.Size != size
}

// isBaseText is a base entry the capture compares contents with: a
// regular file, not a link or a submodule.
func isBaseText(b gitsvc.Entry) bool { return b.Type == "blob" && b.Mode != "120000" }

// gone records that nothing is at p any more, where the checkout was told
// there was a file.
func (c *capturer) gone(p string) error {
	version, told := c.co.synced[p]
	b, inBase := c.base[p]
	switch {
	case told && version == deletedVersion:
		return nil
	case inBase && b.Type == "blob":
		return c.add(pendingEdit{path: p, deleted: true})
	case told: // an added file, gone again
		return c.add(pendingEdit{path: p, forget: true})
	}
	return nil
}

// goneWithAllBelow records p and every path the checkout was told of
// below it as gone: a whiteout.
func (c *capturer) goneWithAllBelow(p string) error {
	delete(c.expect, p)
	if err := c.gone(p); err != nil {
		return err
	}
	return c.goneBelow(p)
}

// goneBelow records every path the checkout was told of below p as gone:
// p is a whiteout, a file or a link, and holds nothing.
func (c *capturer) goneBelow(p string) error {
	if !c.holdsTold(p) {
		return nil
	}
	var err error
	c.eachToldBelow(p, func(q string) bool {
		delete(c.expect, q)
		err = c.gone(q)
		return err == nil
	})
	return err
}

// hideBelow marks every path the checkout was told of below p as gone
// unless the walk meets it: p replaced the base's folder of that name.
func (c *capturer) hideBelow(p string) {
	if c.holdsTold(p) {
		c.eachToldBelow(p, func(q string) bool {
			c.expect[q] = true
			return true
		})
	}
}

// holdsTold says a path the checkout was told of lies below the folder p.
func (c *capturer) holdsTold(p string) bool { return c.editFolders[p] || c.co.holdsBase(p) }

// eachToldBelow calls fn for every path of the base and of the edits
// below the folder p, until fn answers false.
func (c *capturer) eachToldBelow(p string, fn func(string) bool) {
	prefix := p + "/"
	paths := c.co.basePaths()
	for i := sort.SearchStrings(paths, prefix); i < len(paths) && strings.HasPrefix(paths[i], prefix); i++ {
		if _, told := c.co.synced[paths[i]]; !told && !fn(paths[i]) {
			return
		}
	}
	for q := range c.co.synced {
		if strings.HasPrefix(q, prefix) && !fn(q) {
			return
		}
	}
}

// absent concludes on a path the walk expected and did not meet: gone
// when hidden, else as the base has it, which forgets its edit.
func (c *capturer) absent(p string, hidden bool) error {
	if hidden {
		return c.gone(p)
	}
	if _, told := c.co.synced[p]; told {
		return c.add(pendingEdit{path: p, forget: true})
	}
	return nil
}

func (c *capturer) underUnwalked(p string) bool {
	if len(c.unwalked) == 0 {
		return false
	}
	for d := parentDir(p); d != ""; d = parentDir(d) {
		if c.unwalked[d] {
			return true
		}
	}
	return false
}

// add queues an edit, unless it is a new path and the session has no room
// left, and writes the queue once it holds enough.
func (c *capturer) add(pe pendingEdit) error {
	if _, told := c.co.synced[pe.path]; !told && !pe.forget {
		if c.full() {
			c.rep.leave(pe.path, whyFull)
			return nil
		}
		c.added++
	}
	c.pending = append(c.pending, pe)
	c.held += len(pe.content)
	if c.held >= captureHeld || len(c.pending) >= captureBatch {
		return c.flush()
	}
	return nil
}

// flush writes the queued edits as the session's edits, in one short
// transaction that checks the session's path limit against what the
// database has (the editor may have added paths meanwhile). The checkout
// then counts as told of them.
func (c *capturer) flush() error {
	if len(c.pending) == 0 {
		return nil
	}
	found := make([]editsession.Captured, len(c.pending))
	for i, pe := range c.pending {
		found[i] = editsession.Captured{Path: pe.path, Content: pe.content, Deleted: pe.deleted, Forget: pe.forget}
	}
	refused, err := c.r.edits.RecordCaptured(c.ctx, c.sess, found)
	if err != nil {
		return err
	}
	for _, pe := range c.pending {
		switch {
		case refused[pe.path]:
			c.rep.leave(pe.path, whyFull)
		case pe.forget:
			delete(c.co.synced, pe.path)
		default:
			c.co.synced[pe.path] = pe.version()
		}
	}
	clear(c.pending)
	c.pending, c.held, c.added = c.pending[:0], 0, 0
	return nil
}

// parentDir is the folder holding p, "" at the top.
func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}
