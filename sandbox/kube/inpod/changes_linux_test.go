//go:build linux

package inpod

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// base unpacks entries into a new root and returns it with the manifest
// the server would keep.
func base(t *testing.T, entries ...tarEntry) (string, []Entry) {
	t.Helper()
	root := t.TempDir()
	f, st := unpackInto(t, root, nil, entries...)
	if st.Error != "" {
		t.Fatalf("unpack: %+v", st)
	}
	return root, f.entries
}

// changes runs the changes verb with the manifest, failing the test if
// it does not end in time (a FIFO opened would block it).
func changes(t *testing.T, root string, manifest []Entry, flags ...string) (*frames, ChangesStatus) {
	t.Helper()
	return changesOf(t, root, [][]Entry{manifest}, flags...)
}

// changesOf runs changes with sections of input, each ended by an empty
// line, and at each ask reads every file of the batch.
func changesOf(t *testing.T, root string, sections [][]Entry, flags ...string) (*frames, ChangesStatus) {
	t.Helper()
	return changesReading(t, root, sections, func(Entry) bool { return true }, flags...)
}

// changesReading runs changes as the server does: it writes the sections
// of input, then at each ask reads the files of the batch that read
// says, failing the test if the walk does not end in time (a FIFO opened
// would block it). Entries go to f.entries, answers to f.answers and
// their content to f.content, by path.
func changesReading(t *testing.T, root string, sections [][]Entry, read func(Entry) bool, flags ...string) (*frames, ChangesStatus) {
	t.Helper()
	return changesAsked(t, root, sections, read, nil, flags...)
}

// changesAsked is changesReading that, at each ask, also passes over the
// folders of the batch that skip says (AskSkip), as a capture's visit
// does with SkipDir.
func changesAsked(t *testing.T, root string, sections [][]Entry, read, skip func(Entry) bool, flags ...string) (*frames, ChangesStatus) {
	t.Helper()
	in, feed := io.Pipe()
	out, outw := io.Pipe()
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := Main(append([]string{"changes", "-root", root}, flags...), in, outw, &errb)
		outw.Close()
		in.Close()
		done <- code
	}()
	go func() {
		enc := json.NewEncoder(feed)
		for i, section := range sections {
			for _, e := range section {
				if i == 1 { // the known section
					feed.Write(append(AppendKnown(nil, e), '\n'))
				} else {
					enc.Encode(e)
				}
			}
			feed.Write([]byte("\n"))
		}
	}()
	late := time.AfterFunc(10*time.Second, func() { out.CloseWithError(errors.New("changes did not end")) })
	defer late.Stop()

	f := &frames{content: map[string][]byte{}, answers: map[string]Entry{}}
	fr := NewFrameReader(readCounter{out, &f.outBytes}, MaxChunk+64<<10)
	decode := func(p []byte) Entry {
		var e Entry
		if err := json.Unmarshal(p, &e); err != nil {
			t.Fatalf("entry %q: %v", p, err)
		}
		return e
	}
	var batch []Entry
	for f.status == nil {
		kind, p, err := fr.Next()
		if err != nil {
			t.Fatalf("read frames: %v", err)
		}
		switch kind {
		case FrameEntry:
			e := decode(p)
			f.entries = append(f.entries, e)
			batch = append(batch, e)
		case FrameKnown:
			f.known = append(f.known, string(p))
			n, err := strconv.Atoi(string(p))
			if err != nil || len(sections) < 2 || n >= len(sections[1]) {
				t.Fatalf("known line %q", p)
			}
			batch = append(batch, sections[1][n])
		case FrameSections:
			f.need = string(p)
		case FrameAsk:
			f.asks++
			for i, e := range batch {
				if e.Kind != KindFile || !read(e) {
					continue
				}
				fmt.Fprintf(feed, "%s%d\n", AskRead, i)
				kind, p, err := fr.Next()
				if err != nil || kind != FrameEntry {
					t.Fatalf("the answer for %s: frame %q, %v", e.Path, kind, err)
				}
				a := decode(p)
				if a.Path != e.Path {
					t.Fatalf("asked for %s, got %+v", e.Path, a)
				}
				f.answers[a.Path] = a
				if !a.Content {
					continue
				}
				content := []byte{}
				for int64(len(content)) < a.Size {
					kind, p, err := fr.Next()
					if err != nil || kind != FrameContent {
						t.Fatalf("content of %s: frame %q, %v", a.Path, kind, err)
					}
					content = append(content, p...)
				}
				f.content[a.Path] = content
			}
			for _, e := range batch {
				if e.Kind == KindDir && skip != nil && skip(e) {
					fmt.Fprintf(feed, "%s%q\n", AskSkip, e.Path)
				}
			}
			fmt.Fprintln(feed, AskGoOn)
			batch = nil
		case FrameStatus:
			f.status = bytes.Clone(p)
		default:
			t.Fatalf("unexpected frame %q", kind)
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("changes: exit %d: %s", code, errb.String())
	}
	var st ChangesStatus
	f.decodeStatus(t, &st)
	if st.Error != "" {
		t.Fatalf("changes: %+v", st)
	}
	return f, st
}

// byPath indexes entries by path, failing on a path reported twice.
func byPath(t *testing.T, entries []Entry) map[string]Entry {
	t.Helper()
	m := make(map[string]Entry)
	for _, e := range entries {
		if _, ok := m[e.Path]; ok {
			t.Errorf("%s reported twice", e.Path)
		}
		m[e.Path] = e
	}
	return m
}

func TestChangesAfterUnpackReportsNothing(t *testing.T) {
	root, manifest := base(t, file("a", "1"), file("d/b", "2"), dir("empty"), link("l", "a"))
	f, st := changes(t, root, manifest)
	if len(f.entries) != 0 || st.Entries != 0 || st.Overflow {
		t.Errorf("reported %+v, status %+v", f.entries, st)
	}
}

func TestChangesReportsWhatChanged(t *testing.T) {
	root, manifest := base(t, file("same", "s"), file("modified", "old!"), file("deleted", "d"), file("d/relinked", "r"), file("gone/x", "x"))
	// ctime ticks coarsely on some kernels: a same-size rewrite within a
	// tick would look unchanged to any reader of ctime.
	time.Sleep(20 * time.Millisecond)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modified", "new!") // same size, same inode
	write("added", "brand new")
	for _, p := range []string{"deleted", "d/relinked", "gone"} {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../same", filepath.Join(root, "d/relinked")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	f, st := changes(t, root, manifest)
	got := byPath(t, f.entries)
	want := map[string]string{"modified": KindFile, "added": KindFile, "deleted": KindWhiteout, "d/relinked": KindLink, "fifo": KindOther, "gone": KindWhiteout}
	for p, kind := range want {
		if got[p].Kind != kind {
			t.Errorf("%s: reported %+v, want a %s", p, got[p], kind)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s reported, unchanged", p)
		}
	}
	if st.Entries != len(want) {
		t.Errorf("status %+v, want %d entries", st, len(want))
	}
	if string(f.content["modified"]) != "new!" || string(f.content["added"]) != "brand new" {
		t.Errorf("content %q", f.content)
	}
	if !f.answers["modified"].Content || got["modified"].Content || got["d/relinked"].Target != "../same" {
		t.Errorf("entries %+v, answers %+v", got, f.answers)
	}
	if _, ok := f.answers["fifo"]; ok || f.asks != 1 {
		t.Errorf("%d asks, answers %+v: want one ask, for files only", f.asks, f.answers)
	}
}

func TestChangesBigFileWithoutContent(t *testing.T) {
	root, manifest := base(t)
	big := strings.Repeat("x", 100<<10)
	if err := os.WriteFile(filepath.Join(root, "big"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "small"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := changes(t, root, manifest, "-max-file", "1000")
	if e := f.answers["big"]; e.Kind != KindFile || e.Content || e.Size != int64(len(big)) || f.content["big"] != nil {
		t.Errorf("big: %+v", e)
	}
	if !f.answers["small"].Content || string(f.content["small"]) != "s" {
		t.Errorf("small: %+v", f.answers["small"])
	}

	// Within -max-file but over what -max-bytes has left.
	f, _ = changes(t, root, manifest, "-max-file", "200000", "-max-bytes", "1000")
	if got := f.answers; got["big"].Content || !got["small"].Content {
		t.Errorf("with -max-bytes 1000: %+v", got)
	}

	// Content comes in chunks of at most MaxChunk.
	f, _ = changes(t, root, manifest, "-max-file", "200000")
	if string(f.content["big"]) != big {
		t.Errorf("big's content: %d bytes", len(f.content["big"]))
	}
}

func TestChangesDepthBound(t *testing.T) {
	root, manifest := base(t, file("a/b/c/old", "o"))
	if err := os.WriteFile(filepath.Join(root, "a/b/c/new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := changes(t, root, manifest, "-max-depth", "2")
	// a/b is at depth 2: reported, not entered, and what the manifest
	// holds below it is not taken for deleted.
	if len(f.entries) != 1 || f.entries[0].Path != "a/b" || !f.entries[0].TooDeep {
		t.Errorf("reported %+v, want a/b too deep alone", f.entries)
	}
}

func TestChangesEntriesBound(t *testing.T) {
	root, manifest := base(t)
	for _, n := range []string{"1", "2", "3", "4", "5"} {
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, st := changes(t, root, manifest, "-max-entries", "3")
	if !st.Overflow || st.Entries != 3 || len(f.entries) != 3 {
		t.Errorf("status %+v, %d entries, want overflow after 3", st, len(f.entries))
	}
	// The batch cut short by the bound is asked all the same, and empty
	// files have content, zero bytes of it.
	if len(f.content) != 3 || f.content[f.entries[0].Path] == nil {
		t.Errorf("content %q", f.content)
	}
}

// A FIFO swapped in for a file between the walk and the server's request
// is opened without waiting for a writer, seen for what it is and not
// read.
func TestChangesFileSwappedForFIFO(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(root, "f"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	var out bytes.Buffer
	fw := newFrameWriter(&out, false)
	w := &walker{opt: changesOptions{maxDepth: 1, maxEntries: 10, maxFile: 100, maxBytes: 100}, fw: fw, budget: 100, rootfd: dirfd}
	done := make(chan error, 1)
	go func() { done <- w.send(Entry{Path: "f", Kind: KindFile, Size: 1}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the FIFO was waited on")
	}
	if err := fw.flush(); err != nil {
		t.Fatal(err)
	}
	f := readFrames(t, &out)
	if len(f.entries) != 1 || f.entries[0].Kind != KindOther || f.entries[0].Content || len(f.content) != 0 {
		t.Errorf("reported %+v, %q", f.entries, f.content)
	}
}

// A server that cannot close the helper's input ends the manifest with
// an empty line.
func TestChangesManifestEndsAtEmptyLine(t *testing.T) {
	root, manifest := base(t, file("a", "1"))
	in, feed := io.Pipe()
	defer in.Close()
	go func() {
		enc := json.NewEncoder(feed)
		for _, e := range manifest {
			enc.Encode(e)
		}
		feed.Write([]byte("\n")) // and the input stays open
	}()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- Main([]string{"changes", "-root", root}, in, &out, &errb) }()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		in.Close()
		<-done
		t.Fatal("changes waited for the end of its input")
	}
	f := readFrames(t, &out)
	var st ChangesStatus
	f.decodeStatus(t, &st)
	if len(f.entries) != 0 || st.Error != "" {
		t.Errorf("reported %+v, status %+v", f.entries, st)
	}
}

// With -known, a file the server has met as it is (the same inode, ctime,
// size and mode) is named by its line of the known section alone, and
// can still be read; one changed since is sent whole.
func TestChangesLeaveOutKnownContent(t *testing.T) {
	root, manifest := base(t)
	for _, name := range []string{"kept", "rewritten"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := changes(t, root, manifest)
	first := byPath(t, f.entries)
	known := []Entry{first["kept"], first["rewritten"]}
	if err := os.WriteFile(filepath.Join(root, "rewritten"), []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ = changesOf(t, root, [][]Entry{manifest, known}, "-known")
	got := byPath(t, f.entries)
	if e, ok := got["kept"]; ok || !slices.Equal(f.known, []string{"0"}) || string(f.content["kept"]) != "kept" {
		t.Errorf("a known file came as %+v, content %q; known lines %q", e, f.content["kept"], f.known)
	}
	if e := got["rewritten"]; e.Kind != KindFile || string(f.content["rewritten"]) != "again" {
		t.Errorf("a file changed since it was known: %+v %q", e, f.content["rewritten"])
	}
}

// Nothing crosses but what the server reads: of three new files of
// 100 KiB, it reads one, and the helper's output holds that one's content
// and little else.
func TestChangesSendOnlyWhatIsRead(t *testing.T) {
	root, manifest := base(t)
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(root, name), bytes.Repeat([]byte(name), 100<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := changesReading(t, root, [][]Entry{manifest}, func(e Entry) bool { return e.Path == "b" }, "-max-file", "200000")
	if len(f.entries) != 3 || len(f.content) != 1 || len(f.content["b"]) != 100<<10 {
		t.Errorf("%d entries, content of %d files", len(f.entries), len(f.content))
	}
	if f.outBytes > 100<<10+4<<10 {
		t.Errorf("the helper wrote %d bytes for 100 KiB read", f.outBytes)
	}
}

// readCounter adds what it reads to n.
type readCounter struct {
	r io.Reader
	n *int64
}

func (c readCounter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	*c.n += int64(k)
	return k, err
}

// Past AskBatch entries the helper asks, and the server's requests name
// the files of each batch by their place in it.
func TestChangesAskEveryBatch(t *testing.T) {
	root, manifest := base(t)
	for i := range AskBatch + 5 {
		name := filepath.Join(root, strconv.Itoa(i))
		if err := os.WriteFile(name, []byte(strconv.Itoa(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := changes(t, root, manifest)
	if f.asks != 2 || len(f.entries) != AskBatch+5 || len(f.content) != AskBatch+5 {
		t.Fatalf("%d asks, %d entries, %d read", f.asks, len(f.entries), len(f.content))
	}
	for p, c := range f.content {
		if string(c) != p {
			t.Errorf("%s holds %q", p, c)
		}
	}
}

// A folder the server passes over is walked no further once it has said
// so: of a new folder of 5,000 files, only those of the batch the folder
// came in cross, what follows it is still walked, and the manifest's
// files below a folder passed over are not reported gone.
func TestChangesGoNoFurtherBelowAFolderPassedOver(t *testing.T) {
	root, manifest := base(t, tarEntry{name: "kept/old.txt", body: "old"})
	if err := os.MkdirAll(filepath.Join(root, "kept", "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		if err := os.WriteFile(filepath.Join(root, "kept", "big", strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "zz-after.txt"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "kept", "old.txt")); err != nil {
		t.Fatal(err)
	}
	// A folder is reported when its kind or mode changes, not its content.
	if err := os.Chmod(filepath.Join(root, "kept"), 0o700); err != nil {
		t.Fatal(err)
	}
	skip := func(e Entry) bool { return e.Path == "kept" }
	f, _ := changesAsked(t, root, [][]Entry{manifest}, func(Entry) bool { return false }, skip)
	below, after, gone := 0, false, false
	for _, e := range f.entries {
		switch {
		case strings.HasPrefix(e.Path, "kept/"):
			below++
			gone = gone || e.Kind == KindWhiteout
		case e.Path == "zz-after.txt":
			after = true
		}
	}
	if below > AskBatch || !after || gone {
		t.Fatalf("%d entries below the folder passed over (at most %d), the file after it reported %v, a whiteout below it %v",
			below, AskBatch, after, gone)
	}
	// Not passed over, the folder is walked whole, its deletion with it.
	f, _ = changesAsked(t, root, [][]Entry{manifest}, func(Entry) bool { return false }, nil)
	if got := byPath(t, f.entries); len(got) < 5000 || got["kept/old.txt"].Kind != KindWhiteout {
		t.Fatalf("%d entries of a walk that passes over nothing, kept/old.txt %+v", len(got), got["kept/old.txt"])
	}
}

// Given digests of its sections and no main process that holds them,
// changes says first that it needs both, reads them from its input, and
// walks as without digests.
func TestChangesAskForTheSectionsTheyLack(t *testing.T) {
	root, manifest := base(t, tarEntry{name: "a.txt", body: "a"})
	if err := os.WriteFile(filepath.Join(root, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	sections := [][]Entry{manifest, nil}
	f, _ := changesOf(t, root, sections, "-known", "-manifest-digest", strings.Repeat("ab", 32), "-known-digest", strings.Repeat("cd", 32))
	if f.need != "mk" {
		t.Fatalf("the first frame asked for %q, want mk", f.need)
	}
	if got := byPath(t, f.entries); len(got) != 1 || got["b.txt"].Kind != KindFile {
		t.Fatalf("entries %+v", f.entries)
	}
	// Without digests there is no such frame.
	if f, _ := changesOf(t, root, sections, "-known"); f.need != "" {
		t.Fatalf("a frame of sections without digests: %q", f.need)
	}
}

// The main process holds the latest two sections within heldMax: a third,
// or one that would pass the total, lets the oldest go.
func TestSupervisorHoldsTheLatestSections(t *testing.T) {
	var s supervisor
	s.hold("a", []byte("first"))
	s.hold("b", []byte("second"))
	s.hold("c", []byte("third"))
	if s.holding("a") != nil || string(s.holding("b")) != "second" || string(s.holding("c")) != "third" {
		t.Fatalf("held after three: %q %q %q", s.holding("a"), s.holding("b"), s.holding("c"))
	}
	s.hold("big", make([]byte, heldMax-2))
	if s.holding("b") != nil || s.holding("c") != nil || len(s.holding("big")) != heldMax-2 {
		t.Fatal("a section that fills the bound did not let the others go")
	}
	s.hold("huge", make([]byte, heldMax+1))
	if s.holding("huge") != nil || s.holding("big") != nil {
		t.Fatal("a section past the bound is held")
	}
}

// A request that names no entry of the batch ends the walk with an error.
func TestChangesRefuseABadRequest(t *testing.T) {
	root, manifest := base(t)
	if err := os.WriteFile(filepath.Join(root, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, request := range []string{"r 1", "r -1", "r x", "x"} {
		var in bytes.Buffer
		for _, e := range manifest {
			json.NewEncoder(&in).Encode(e)
		}
		in.WriteString("\n" + request + "\n")
		var out, errb bytes.Buffer
		if code := Main([]string{"changes", "-root", root}, &in, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", request, code, errb.String())
		}
		f := readFrames(t, &out)
		var st ChangesStatus
		f.decodeStatus(t, &st)
		if !strings.Contains(st.Error, "request") || len(f.content) != 0 {
			t.Errorf("%s: status %+v, content %q", request, st, f.content)
		}
	}
}

// The session's code swaps a file, or a folder above it, for a link
// between the walk and the server's request: the helper follows neither,
// and what the link points at is never sent.
func TestChangesFollowNoLinkSwappedIn(t *testing.T) {
	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, "f"), []byte("not yours"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, manifest := base(t)
	for _, name := range []string{"f", "d/f"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(e Entry) bool {
		p, target := filepath.Join(root, "f"), filepath.Join(elsewhere, "f")
		if e.Path == "d/f" {
			p, target = filepath.Join(root, "d"), elsewhere
		}
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return true
	}
	f, _ := changesReading(t, root, [][]Entry{manifest}, swap)
	for _, p := range []string{"f", "d/f"} {
		if a := f.answers[p]; a.Kind != KindWhiteout || f.content[p] != nil {
			t.Errorf("%s swapped for a link: answered %+v, content %q", p, a, f.content[p])
		}
	}
}

// Long paths end a batch before AskBatch entries: the server holds a
// batch's paths, within AskBatchBytes and one entry.
func TestChangesAskPastTheBatchBytes(t *testing.T) {
	root, manifest := base(t)
	deep := root
	for i := range 15 {
		deep = filepath.Join(deep, strings.Repeat(strconv.Itoa(i%10), 250))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := os.WriteFile(filepath.Join(deep, fmt.Sprintf("%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := changes(t, root, manifest)
	if len(f.entries) != 315 || f.asks < 2 {
		t.Fatalf("%d entries in %d asks: long paths did not end a batch", len(f.entries), f.asks)
	}
}
