package server

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"atelier/editsession"
	"atelier/workbench"
)

// What a capture costs the server is what the session's limits allow, not
// what its code wrote: these tests write what an attacker would from
// inside a session and measure the server's own process (it runs in the
// test's).

// serverPeaks samples this process's heap and open descriptors every few
// milliseconds until the returned stop is called.
type serverPeaks struct {
	heap, fds atomic.Int64
	done      chan struct{}
	wg        sync.WaitGroup
}

func sampleServer(t *testing.T) *serverPeaks {
	t.Helper()
	p := &serverPeaks{done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	p.wg.Go(func() {
		for {
			metrics.Read(sample)
			if v := int64(sample[0].Value.Uint64()); v > p.heap.Load() {
				p.heap.Store(v)
			}
			if n := int64(openFDs(t)); n > p.fds.Load() {
				p.fds.Store(n)
			}
			select {
			case <-p.done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return p
}

// stop ends the sampling and answers the peaks.
func (p *serverPeaks) stop() (heap, fds int64) {
	close(p.done)
	p.wg.Wait()
	return p.heap.Load(), p.fds.Load()
}

// liveHeap is the heap's live objects right after a collection.
func liveHeap() int64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return int64(sample[0].Value.Uint64())
}

func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Error(err)
		return 0
	}
	return len(entries) - 1
}

// readBytes is how many bytes this process has read through system
// calls, from files and sockets alike (rchar).
func readBytes(t *testing.T) int64 { return procIO(t, "rchar") }

// readCalls is how many read system calls this process has made, on
// files and sockets alike (syscr): a file read costs one at least, however
// small it is.
func readCalls(t *testing.T) int64 { return procIO(t, "syscr") }

// procIO is one counter of /proc/self/io.
func procIO(t *testing.T, counter string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), counter+": "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/io", counter)
	return 0
}

// notesSay reports whether a note contains want.
func notesSay(notes []string, want string) bool {
	for _, n := range notes {
		if strings.Contains(n, want) {
			return true
		}
	}
	return false
}

// TestCaptureOfManyLargeFilesHoldsLittle: 4,000 text files of 256 KiB (1 GiB
// in all) written by one command cost the server's heap less than 64 MiB,
// only the session's 200 paths become edits, the rest are noted without
// being read, and the next `true` reads none of them again. (What that
// next `true` takes beside an untouched checkout's is the abuse suite's
// capture rows: a speed, judged where nothing else runs.) The capture's
// time budget is out of the way: this is about memory, on a machine that
// may be busy.
func TestCaptureOfManyLargeFilesHoldsLittle(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.SandboxCaptureBudget = 5 * time.Minute })
	captureOfManyLargeFilesHoldsLittle(t, h, readBytes)
}

// In a pod, what a capture reads is what the helper sends it over exec,
// and only what it reads crosses: none of the files left out.
func TestCaptureOfManyLargeFilesHoldsLittleInAPod(t *testing.T) {
	needRoot(t)
	h := newHarness(t, onKube(t), func(c *Config) { c.SandboxCaptureBudget = 5 * time.Minute })
	captureOfManyLargeFilesHoldsLittle(t, h, func(t *testing.T) int64 { return podBytes(t, h) })
}

// reads counts, as a command runs, how much its capture reads.
func captureOfManyLargeFilesHoldsLittle(t *testing.T, h *harness, reads func(*testing.T) int64) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	owner.mustRun(base, "true") // the checkout is built

	before := liveHeap()
	peaks := sampleServer(t)
	// The command ends past the racy margin after its last write, so
	// that its capture trusts every file it reads by its stat. Not a wait
	// for an event: ctimes are stamped by the kernel's clock, which no
	// test can move, and it is on that clock that the margin must pass.
	out := owner.mustRun(base, `python3 -c '
import os
os.makedirs("big", exist_ok=True)
for i in range(4000):
    with open("big/f%04d.txt" % i, "w") as f:
        f.write(("%04d" % i) * 65536)
' && sleep 1.1`)
	heap, _ := peaks.stop()
	if grew := heap - before; grew > 64<<20 {
		t.Errorf("the capture grew the server's heap by %d MiB", grew>>20)
	}
	if n := len(changesOf(t, owner, base)); n != editsession.MaxPaths {
		t.Errorf("%d paths became edits, want the session's %d", n, editsession.MaxPaths)
	}
	if !notesSay(out.Notes, "the session already changes 200 paths") || !notesSay(out.Notes, "and 3750 more left out") {
		t.Errorf("notes %q", out.Notes)
	}

	read := reads(t)
	again := owner.mustRun(base, "true")
	if n := reads(t) - read; n > 16<<20 {
		t.Errorf("the next command read %d MiB again", n>>20)
	}
	if !notesSay(again.Notes, "and 3750 more left out") {
		t.Errorf("the next command's notes %q", again.Notes)
	}
}

// TestCaptureOfDeepTreesIsBounded: folders 3,000 and 20,000 levels deep
// cost a capture a bounded number of descriptors and time; the deep
// folder is noted and stays in the checkout, and the next commands run.
func TestCaptureOfDeepTreesIsBounded(t *testing.T) {
	needRoot(t)
	captureOfDeepTreesIsBounded(t, newHarness(t))
}

// The same in a pod: the pod's helper walks the tree within the depth
// bound, and what the server holds stays bounded.
func TestCaptureOfDeepTreesIsBoundedInAPod(t *testing.T) {
	needRoot(t)
	captureOfDeepTreesIsBounded(t, newHarness(t, onKube(t)))
}

func captureOfDeepTreesIsBounded(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	owner.mustRun(base, "true")
	for _, depth := range []int{3000, 20000} {
		fds := openFDs(t)
		peaks := sampleServer(t)
		start := time.Now()
		out := owner.mustRun(base, fmt.Sprintf(`python3 -c '
import os
os.makedirs("deep%[1]d", exist_ok=True)
os.chdir("deep%[1]d")
for i in range(%[1]d):
    os.mkdir("d")
    os.chdir("d")
open("bottom.txt", "w").write("deep\n")
'`, depth))
		took := time.Since(start)
		_, peak := peaks.stop()
		if held := peak - int64(fds); held > 100 {
			t.Errorf("%d deep: the server held %d descriptors more than before", depth, held)
		}
		if took > 60*time.Second {
			t.Errorf("%d deep: the command took %v", depth, took)
		}
		if !notesSay(out.Notes, fmt.Sprintf("more than %d folders deep", workbench.CaptureDepth)) {
			t.Errorf("%d deep: notes %q", depth, out.Notes)
		}
		t.Logf("%d deep: %v, %d descriptors more at the peak", depth, took, peak-int64(fds))
	}
	// The trees stay in the checkout, and the session works on.
	out := owner.mustRun(base, "find deep3000 -name bottom.txt | wc -l; echo more > more.txt")
	if strings.TrimSpace(out.Stdout) != "1" {
		t.Fatalf("the deep tree is gone from the checkout: %q", out.Stdout)
	}
	if got := changesOf(t, owner, base); got["more.txt"] != "added" {
		t.Fatalf("changes %v", got)
	}
}

// TestCaptureOfManyTinyFilesIsBounded: 100,000 small files cost the
// command that wrote them a bounded capture, which reads only the files
// that become edits, and the next `true` reads none of them (its speed is
// the abuse suite's, as above).
func TestCaptureOfManyTinyFilesIsBounded(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.SandboxCaptureBudget = 5 * time.Minute })
	captureOfManyTinyFilesIsBounded(t, h, readCalls, 10_000, 10_000)
}

// In a pod, the bound is on what crosses from the helper: the first
// capture gets the 100,000 entries (some 100 bytes each) and the content
// of the files that become edits alone; the next one gets each file as
// a number of a few bytes, as they are known.
func TestCaptureOfManyTinyFilesIsBoundedInAPod(t *testing.T) {
	needRoot(t)
	h := newHarness(t, onKube(t), func(c *Config) { c.SandboxCaptureBudget = 5 * time.Minute })
	// The helper walks no further below a folder the capture passes over
	// (the session's paths full), so of each such folder only what came
	// in its batch crosses: 8 MB here, 15.6 MB when it walked them whole.
	owner, base := captureOfManyTinyFilesIsBounded(t, h, func(t *testing.T) int64 { return podBytes(t, h) }, 10<<20, 2<<20)
	// The 100,000 known files went into the pod as a list of 4 MB with
	// that command; its main process holds the list, and a command that
	// changes nothing sends it again by its digest alone.
	into := podInput(t, h)
	owner.mustRun(base, "true")
	if n := podInput(t, h) - into; n > 256<<10 {
		t.Errorf("a command that changed nothing sent %d bytes into the pod", n)
	}
}

// reads counts, as a command runs, what its capture reads: the first
// command's at most first, the next one's at most next.
func captureOfManyTinyFilesIsBounded(t *testing.T, h *harness, reads func(*testing.T) int64, first, next int64) (*client, string) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	calls := reads(t)
	out := owner.mustRun(base, `python3 -c '
import os
for d in range(100):
    os.makedirs("tiny/%02d" % d)
    for f in range(1000):
        with open("tiny/%02d/%03d.txt" % (d, f), "w") as fh:
            fh.write("x")
'`)
	if n := len(changesOf(t, owner, base)); n != editsession.MaxPaths {
		t.Errorf("%d paths became edits, want %d", n, editsession.MaxPaths)
	}
	if !notesSay(out.Notes, "and 849 more left out") {
		t.Errorf("notes %q", out.Notes)
	}
	if n := reads(t) - calls; n > first {
		t.Errorf("the command's capture read %d: it read the files past the session's paths", n)
	}
	// Past the racy margin (on the kernel's clock, which stamps ctimes
	// and which no test can move), the files read are trusted.
	time.Sleep(1100 * time.Millisecond)
	calls = reads(t)
	owner.mustRun(base, "true")
	if n := reads(t) - calls; n > next {
		t.Errorf("the next command read %d: the 100,000 files were read again", n)
	}
	return owner, base
}

// TestCaptureStopsAtItsBudget: a capture that runs out of time records only
// what it looked at, says so, takes nothing for deleted that it did not
// reach, and the next captures go on where the files it read are known:
// in the end every change is recorded exactly.
func TestCaptureStopsAtItsBudget(t *testing.T) {
	needRoot(t)
	captureStopsAtItsBudget(t, 200*time.Millisecond)
}

// In a pod every file a capture reads is a request to the pod's helper
// and its answer over exec, several times the jail's time a file: the
// budget is larger, so that a capture on a loaded machine still gets far
// enough, and still far short of the 256 MiB to read.
func TestCaptureStopsAtItsBudgetInAPod(t *testing.T) {
	needRoot(t)
	captureStopsAtItsBudget(t, 400*time.Millisecond, onKube(t))
}

func captureStopsAtItsBudget(t *testing.T, budget time.Duration, tweak ...func(*Config)) {
	h := newHarness(t, append(tweak, func(c *Config) { c.SandboxCaptureBudget = budget })...)
	owner := h.user("owner", true)
	id := owner.createProject("budget")
	// 1,000 files of 256 KiB: touching them all copies 256 MiB into the
	// checkout's upper layer, which a capture must read and hash to know
	// they did not change, while looking again at those it knows costs a
	// stat each: every capture gets further than the one before. They come
	// from a repository on the server (git writes it at its own speed; this
	// process, built with the race detector, would take a minute to pack
	// them).
	src := t.TempDir()
	body := []byte(strings.Repeat("a", editsession.MaxFileBytes))
	for i := range 1000 {
		p := filepath.Join(src, fmt.Sprintf("d%02d/f%04d.txt", i/100, i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "files"}} {
		if out, err := exec.Command("git", append([]string{"-C", src}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if res := owner.post("/projects/"+itoa(id)+"/import", url.Values{"source": {src}}, jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	_, base := owner.session(id)
	out := owner.mustRun(base, "find . -name '*.txt' -exec touch {} + && rm d07/f0700.txt && echo new > d09/new.txt")
	if !notesSay(out.Notes, "the capture stopped after "+budget.String()) {
		t.Fatalf("notes of a capture past its budget: %q", out.Notes)
	}
	want := map[string]string{"d07/f0700.txt": "deleted", "d09/new.txt": "added"}
	captures := 1
	for ; captures < 60 && notesSay(out.Notes, "the capture stopped"); captures++ {
		for p, status := range changesOf(t, owner, base) {
			if want[p] != status {
				t.Fatalf("a capture recorded %s as %s", p, status)
			}
		}
		// What was read is trusted by the next capture once the racy
		// margin has passed on the kernel's clock, which no test can move.
		time.Sleep(1100 * time.Millisecond)
		out = owner.mustRun(base, "true")
	}
	if notesSay(out.Notes, "the capture stopped") {
		t.Fatalf("no capture of %d finished: %q", captures, out.Notes)
	}
	t.Logf("%d captures", captures)
	if got := changesOf(t, owner, base); len(got) != len(want) || got["d07/f0700.txt"] != "deleted" || got["d09/new.txt"] != "added" {
		t.Fatalf("changes %v, want %v", got, want)
	}
}

// TestHostileNamesStayOutOfCaptures: a command that writes files and
// folders with each hostile name (and files below such a folder) makes no
// edit of them; each is noted, quoted so that the note itself neither
// splits a line nor recolours a terminal, and the rest is captured.
func TestHostileNamesStayOutOfCaptures(t *testing.T) {
	needRoot(t)
	hostileNamesStayOutOfCaptures(t, newHarness(t))
}

// The same in a pod: the pod's helper reports the names, the capture
// leaves them out.
func TestHostileNamesStayOutOfCapturesInAPod(t *testing.T) {
	needRoot(t)
	hostileNamesStayOutOfCaptures(t, newHarness(t, onKube(t)))
}

func hostileNamesStayOutOfCaptures(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	_, base := owner.session(id)
	script := "import os\n"
	for name := range hostileNames {
		script += fmt.Sprintf("open(%q, 'w').write('x')\nos.makedirs(os.path.join('src', %q), exist_ok=True)\nopen(os.path.join('src', %q, 'inside.txt'), 'w').write('x')\n",
			name, name, name)
	}
	script += "open('fine.txt', 'w').write('fine')\n"
	out := owner.mustRun(base, "echo "+base64.StdEncoding.EncodeToString([]byte(script))+" | base64 -d | python3")
	if got := changesOf(t, owner, base); len(got) != 1 || got["fine.txt"] != "added" {
		t.Fatalf("changes %v, want fine.txt alone", got)
	}
	for name := range hostileNames {
		for _, p := range []string{name, "src/" + name} {
			quoted := strconv.QuoteToASCII(p)
			if !notesSay(out.Notes, quoted+": left out, not a valid path") {
				t.Errorf("no quoted note for %q: %q", p, out.Notes)
			}
		}
	}
	for _, n := range out.Notes {
		if strings.ContainsAny(n, "\n\x1b\u202e") {
			t.Errorf("a note carries the name raw: %q", n)
		}
	}
}
