package server

import (
	"bufio"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"atelier/testrig/wait"
)

// An upload's body is read only once the request is known to be allowed.
// These tests send an import as an attacker would: a 100 MiB file part with
// no closing boundary, written piece by piece on a connection of its own to
// a server that counts what it reads, while the test watches the server's
// temporary folder (TMPDIR, where Go's form parsing spills) and the files it
// holds open there or where uploads wait.

// countingListener counts the bytes the server reads from its connections.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// countedServer serves h's application on a listener of its own that
// counts what the server reads.
func countedServer(t *testing.T, h *harness) (addr string, read *atomic.Int64) {
	t.Helper()
	read = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h.app.Handler)
	srv.Listener = countingListener{Listener: srv.Listener, read: read}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), read
}

// ownTempDir points TMPDIR, where Go's form parsing spills file parts, at
// an empty folder of the test's own and returns it.
func ownTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir() // made before TMPDIR moves, so it lies elsewhere
	t.Setenv("TMPDIR", dir)
	if os.TempDir() != dir {
		t.Fatalf("os.TempDir() is %s, not the test's %s", os.TempDir(), dir)
	}
	return dir
}

// heldOnDisk is how many bytes of files this process holds open below
// dirs, named or already removed: what requests spill or spool.
func heldOnDisk(t *testing.T, dirs ...string) int64 {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Error(err)
		return 0
	}
	var held int64
	for _, e := range entries {
		fd := filepath.Join("/proc/self/fd", e.Name())
		target, err := os.Readlink(fd)
		if err != nil {
			continue // closed meanwhile
		}
		target = strings.TrimSuffix(target, " (deleted)")
		for _, dir := range dirs {
			if !strings.HasPrefix(target, dir+"/") {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				held += st.Size
			}
		}
	}
	return held
}

// diskPeak samples heldOnDisk every few milliseconds until stop.
func diskPeak(t *testing.T, dirs ...string) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if n := heldOnDisk(t, dirs...); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	return func() int64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// rawUpload is an import sent by hand: part is the file part's length,
// written in pieces of 64 KiB after its header, with no closing boundary
// and a Content-Length that promises more, so the body never ends.
type rawUpload struct {
	path    string
	cookies string // a Cookie header, or ""
	token   string // an X-CSRF-Token header, or ""
	field   string // a csrf_token field before the file part, or ""
	part    int64
	// After holdAt bytes of the part the writer waits until hold is
	// closed (or the server answers): an upload on a slow line.
	holdAt int64
	hold   <-chan struct{}
}

// uploadResult is what became of a rawUpload.
type uploadResult struct {
	res  *http.Response // nil when no answer came in time
	sent int64          // bytes of the body the test wrote
}

// send writes the upload to addr until the server answers, the part is
// all sent or the connection breaks; then it waits for an answer up to
// wait, holding the connection open.
func (u rawUpload) send(t *testing.T, addr string, wait time.Duration) uploadResult {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var head strings.Builder
	mw := multipart.NewWriter(&head)
	if u.field != "" {
		mw.WriteField("csrf_token", u.field)
	}
	mw.CreateFormFile("archive", "big.zip")
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nAccept: application/json\r\n",
		u.path, addr, mw.FormDataContentType(), int64(head.Len())+u.part+1<<20)
	if u.cookies != "" {
		fmt.Fprintf(conn, "Cookie: %s\r\n", u.cookies)
	}
	if u.token != "" {
		fmt.Fprintf(conn, "X-CSRF-Token: %s\r\n", u.token)
	}
	io.WriteString(conn, "\r\n"+head.String())

	answered := make(chan *http.Response, 1)
	go func() {
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			close(answered)
			return
		}
		io.Copy(io.Discard, res.Body)
		answered <- res
	}()
	var sent int64
	piece := make([]byte, 64<<10)
	for sent < u.part {
		select {
		case res := <-answered:
			return uploadResult{res: res, sent: sent}
		default:
		}
		if u.hold != nil && sent >= u.holdAt {
			select {
			case res := <-answered:
				return uploadResult{res: res, sent: sent}
			case <-u.hold:
				u.hold = nil
			}
		}
		conn.SetWriteDeadline(time.Now().Add(wait))
		n, err := conn.Write(piece[:min(int64(len(piece)), u.part-sent)])
		sent += int64(n)
		if err != nil {
			break
		}
	}
	select {
	case res := <-answered:
		return uploadResult{res: res, sent: sent}
	case <-time.After(wait):
		return uploadResult{sent: sent}
	}
}

func cookieHeader(c *client, base string) string {
	u, _ := url.Parse(base)
	var parts []string
	for _, ck := range c.http.Jar.Cookies(u) {
		parts = append(parts, ck.Name+"="+ck.Value)
	}
	return strings.Join(parts, "; ")
}

// Nobody who may not import gets a byte of their upload read: an anonymous
// sender, an outsider, a member without the right, and the owner's own
// browser tricked into posting (a token only as a form field, which no
// upload may carry) are each answered before the body is read: the server
// reads no more than the request's head and its first few KiB, and
// nothing is written to the temporary folder or where uploads wait.
func TestRefusedUploadsAreNotRead(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	member := h.user("member", false)
	outsider := h.user("outsider", false)
	id := owner.createProject("target")
	owner.addMember(id, "member", "member")
	tmp := ownTempDir(t)
	addr, read := countedServer(t, h)
	base := h.srv.URL
	path := "/projects/" + itoa(id) + "/import"

	cases := []struct {
		name       string
		upload     rawUpload
		wantStatus int
		wantReason string
	}{
		{"anonymous, no token", rawUpload{path: path}, http.StatusUnauthorized, "sign_in_required"},
		{"anonymous, token in the form", rawUpload{path: path, field: strings.Repeat("c", 40)}, http.StatusUnauthorized, "sign_in_required"},
		{"outsider", rawUpload{path: path, cookies: cookieHeader(outsider, base), token: outsider.csrf}, http.StatusNotFound, "not_found"},
		{"member without import rights", rawUpload{path: path, cookies: cookieHeader(member, base), token: member.csrf}, http.StatusForbidden, "forbidden"},
		{"member, token in the form", rawUpload{path: path, cookies: cookieHeader(member, base), field: member.csrf}, http.StatusForbidden, "csrf"},
		{"owner, token in the form", rawUpload{path: path, cookies: cookieHeader(owner, base), field: owner.csrf}, http.StatusForbidden, "csrf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.upload.part = 100 << 20
			before := read.Load()
			stop := diskPeak(t, tmp, h.cfg.UploadDir())
			got := c.upload.send(t, addr, 10*time.Second)
			peak := stop()
			consumed := read.Load() - before
			t.Logf("sent %d KiB of the part; the server read %d KiB and held %d KiB on disk", got.sent>>10, consumed>>10, peak>>10)
			if got.res == nil {
				t.Fatalf("no answer within 10 s after sending %d MiB; the server read %d MiB and holds %d MiB on disk",
					got.sent>>20, consumed>>20, heldOnDisk(t, tmp, h.cfg.UploadDir())>>20)
			}
			if got.res.StatusCode != c.wantStatus {
				t.Fatalf("answered %d, want %d", got.res.StatusCode, c.wantStatus)
			}
			// The head and what the server's first read of the
			// connection brought (4 KiB); not even the 256 KiB net/http
			// reads past an unread body to find the next request.
			if consumed > 64<<10 {
				t.Errorf("the server read %d KiB of the request before refusing it", consumed>>10)
			}
			if peak != 0 {
				t.Errorf("the server held %d KiB on disk for a refused upload", peak>>10)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("the temporary folder holds %v", left)
			}
		})
	}
}

// An upload that is allowed waits in a file of its import's own, never
// larger than ATELIER_IMPORT_MAX_BYTES and never in the temporary folder,
// and an import refused as busy (ATELIER_IMPORTS_MAX reached) is answered
// before its upload is read: the files uploads wait in are bounded by the
// imports running at once.
func TestUploadsWaitWithinTheirImport(t *testing.T) {
	const maxImport = 8 << 20
	h := newHarness(t, func(c *Config) { c.MaxImportBytes = maxImport; c.ImportsMax = 1 })
	owner := h.user("owner", false)
	first, second := owner.createProject("first"), owner.createProject("second")
	tmp := ownTempDir(t)
	addr, read := countedServer(t, h)
	cookies := cookieHeader(owner, h.srv.URL)

	// The first upload holds the instance's one import while it arrives
	// on a slow line: a quarter of the bound, a pause, then on past the
	// bound.
	stop := diskPeak(t, tmp, h.cfg.UploadDir())
	slow := make(chan uploadResult, 1)
	resume := make(chan struct{})
	go func() {
		slow <- rawUpload{path: "/projects/" + itoa(first) + "/import", cookies: cookies, token: owner.csrf,
			part: 3 * maxImport, holdAt: maxImport / 4, hold: resume}.send(t, addr, 20*time.Second)
	}()
	wait.For(t, wait.Long, "a quarter of the bound of the slow upload on disk", func() bool {
		return heldOnDisk(t, h.cfg.UploadDir()) >= maxImport/4
	})

	before := read.Load()
	busy := rawUpload{path: "/projects/" + itoa(second) + "/import", cookies: cookies, token: owner.csrf, part: 100 << 20}.send(t, addr, 10*time.Second)
	if busy.res == nil || busy.res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("an upload while the instance's import runs: %+v, want 429", busy.res)
	}
	// What the server read meanwhile is the busy request's head and what
	// was already on its way of the paused upload.
	if consumed := read.Load() - before; consumed > 1<<20 {
		t.Errorf("the server read %d KiB while refusing an import as busy", consumed>>10)
	}

	close(resume)
	got := <-slow
	peak := stop()
	if got.res == nil || got.res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("an upload past ATELIER_IMPORT_MAX_BYTES: %+v, want 413", got.res)
	}
	if peak > maxImport+1<<20 {
		t.Errorf("the upload held %d MiB on disk, more than the %d MiB bound", peak>>20, maxImport>>20)
	}
	if peak == 0 {
		t.Error("the allowed upload never reached its file (the test measured nothing)")
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the temporary folder holds %v", left)
	}
	if n := heldOnDisk(t, h.cfg.UploadDir()); n != 0 {
		t.Errorf("%d KiB of uploads are still held after their requests ended", n>>10)
	}
	// The place is free again, and an honest import goes through.
	if res := owner.upload(second, "a.tar.gz", smallArchive(t, "after\n"), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("an import after the refused ones: %d %s", res.StatusCode, readBody(res))
	}
}
