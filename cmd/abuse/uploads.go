package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"atelier/testrig/archivebomb"
)

// Uploads an import must not read, and archives it must not unpack. The
// server's temporary folder is one of the suite's own (TMPDIR, set in
// prepare), where Go's form parsing would spill file parts; uploads the
// server keeps wait below <data>/uploads.

// serverRead is how many bytes the process has read through system calls,
// sockets and files alike (rchar), -1 when unreadable.
func serverRead(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// heldBelow is how many bytes of files the process holds open below dirs,
// named or already removed.
func heldBelow(pid int, dirs ...string) int64 {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fds)
	if err != nil {
		return 0
	}
	var held int64
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fds, e.Name()))
		if err != nil {
			continue
		}
		target = strings.TrimSuffix(target, " (deleted)")
		for _, dir := range dirs {
			if strings.HasPrefix(target, dir+"/") {
				if info, err := os.Stat(filepath.Join(fds, e.Name())); err == nil && info.Mode().IsRegular() {
					held += info.Size()
				}
			}
		}
	}
	return held
}

// ownReads is what the server may read meanwhile on its own (its
// database's answers to its background jobs, /proc), which rchar counts
// with the uploads: far below one upload's 100 MiB, which is the point.
const ownReads = 1 << 20

// unterminatedUploads sends n anonymous imports at once, each a file part
// of size bytes with no closing boundary in a body that promises more,
// written until the server answers. Every one must be answered 401 before
// its body is read: the server reads the requests' heads and at most a
// few KiB more of each (64 KiB each, and ownReads an instance, are allowed),
// and holds nothing on disk.
func unterminatedUploads(s *server, n int, size int64) (string, bool) {
	pids := s.pids()
	spill := []string{filepath.Join(s.dataDir, "uploads")}
	for _, in := range s.instances() {
		spill = append(spill, in.tmp)
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			var held int64
			for _, pid := range pids {
				held += heldBelow(pid, spill...)
			}
			peak.Store(max(peak.Load(), held))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	readAll := func() int64 {
		var sum int64
		for _, pid := range pids {
			n := serverRead(pid)
			if n < 0 {
				return -1
			}
			sum += n
		}
		return sum
	}
	before := readAll()
	addr, _ := s.front()
	var refused, cut, other atomic.Int64
	var sent atomic.Int64
	var slowest atomic.Int64
	var firstOther atomic.Value
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			status, wrote, err := sendUnterminated(addr, attackerDialer(i), size)
			sent.Add(wrote)
			if took := int64(time.Since(start)); took > slowest.Load() {
				slowest.Store(took)
			}
			switch {
			case err == nil && status == http.StatusUnauthorized:
				refused.Add(1)
				return
			case errors.Is(err, errCutUnanswered) && s.lb != nil:
				// The instance answered 401 and closed; HAProxy then
				// resets a client still writing the body, and the
				// reset may overtake the answer it passed on.
				cut.Add(1)
				return
			}
			other.Add(1)
			firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %v", status, err))
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // the server reads and holds nothing after its answers either
	read := readAll() - before
	close(stop)
	sampler.Wait()
	detail := fmt.Sprintf("%d of %d answered 401 (slowest %s), %d cut by the balancer; the server read %d KiB in all (the attackers wrote %d MiB into their sockets) and held %d KiB on disk",
		refused.Load(), n, ms(time.Duration(slowest.Load())), cut.Load(), read>>10, sent.Load()>>20, peak.Load()>>10)
	if why := firstOther.Load(); why != nil {
		detail += fmt.Sprintf("; first other answer: %v", why)
	}
	good := refused.Load()+cut.Load() == int64(n) && peak.Load() == 0 && read >= 0 && read < int64(n)*(64<<10)+ownReads*int64(len(pids))
	return detail, good
}

// errCutUnanswered: the connection ended before any answer came.
var errCutUnanswered = errors.New("the connection ended without an answer")

// sendUnterminated writes one anonymous import of a size-byte file part
// until the server answers, and returns the answer's status and how many
// bytes of the part were written. It gives up after 30 s without one.
func sendUnterminated(addr string, d *net.Dialer, size int64) (status int, wrote int64, err error) {
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	var head strings.Builder
	mw := multipart.NewWriter(&head)
	if _, err := mw.CreateFormFile("archive", "big.zip"); err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Fprintf(conn, "POST /projects/1/import HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nAccept: application/json\r\n\r\n%s",
		addr, mw.FormDataContentType(), int64(head.Len())+size+1<<20, head.String()); err != nil {
		return 0, 0, err
	}
	answered := make(chan int, 1) // 0: the connection ended without an answer
	go func() {
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- 0
			return
		}
		res.Body.Close()
		answered <- res.StatusCode
	}()
	answer := func(status int) (int, int64, error) {
		if status == 0 {
			return 0, wrote, errCutUnanswered
		}
		return status, wrote, nil
	}
	piece := make([]byte, 64<<10)
	deadline := time.Now().Add(30 * time.Second)
	for wrote < size {
		select {
		case status := <-answered:
			return answer(status)
		default:
		}
		conn.SetWriteDeadline(deadline)
		n, err := conn.Write(piece[:min(int64(len(piece)), size-wrote)])
		wrote += int64(n)
		if err != nil {
			break // the server closed the connection after its answer, or the deadline
		}
	}
	select {
	case status := <-answered:
		return answer(status)
	case <-time.After(time.Until(deadline)):
		return 0, wrote, fmt.Errorf("no answer after %d MiB", wrote>>20)
	}
}

// archiveBombs uploads a zip of zeros that unpacks to zerosMiB and a zip
// of entries empty files into a project of its own: both must be refused
// with 400 archive_too_large, canonical must not move, and the project's
// repository must gain no object.
func archiveBombs(s *server, c *client, zerosMiB, entries int) (string, bool) {
	id, err := c.CreateProject("abuse-bombs")
	if err != nil {
		return err.Error(), false
	}
	canonical := func() string {
		var v struct {
			Project struct {
				CanonicalCommit string `json:"canonicalCommit"`
			} `json:"project"`
		}
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/projects/%d", c.Base, id), nil)
		resp, err := c.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&v)
		return v.Project.CanonicalCommit
	}
	objects := func() int {
		n := 0
		filepath.WalkDir(filepath.Join(s.dataDir, "git", fmt.Sprintf("project-%d.git", id), "objects"), func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		return n
	}
	beforeCommit, beforeObjects := canonical(), objects()

	zeros, err := archivebomb.ZipOfZeros(zerosMiB)
	if err != nil {
		return err.Error(), false
	}
	var many bytes.Buffer
	if err := archivebomb.WriteZipOfEmptyFiles(&many, entries); err != nil {
		return err.Error(), false
	}
	var parts []string
	good := true
	for _, b := range []struct {
		what    string
		archive []byte
	}{
		{fmt.Sprintf("%d GiB of zeros (%.1f MB)", zerosMiB>>10, float64(len(zeros))/1e6), zeros},
		{fmt.Sprintf("%d empty entries (%.0f MB)", entries, float64(many.Len())/1e6), many.Bytes()},
	} {
		start := time.Now()
		status, reason, err := c.uploadRaw(id, "bomb.zip", b.archive)
		took := time.Since(start)
		if err != nil || status != http.StatusBadRequest || reason != "archive_too_large" {
			good = false
			parts = append(parts, fmt.Sprintf("%s: %d %s %v", b.what, status, reason, err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s answered 400 archive_too_large in %s", b.what, ms(took)))
	}
	detail := strings.Join(parts, ", ")
	if after := canonical(); after != beforeCommit {
		good = false
		detail += "; canonical moved"
	}
	if after := objects(); after != beforeObjects {
		good = false
		detail += fmt.Sprintf("; %d objects stored", after-beforeObjects)
	} else {
		detail += "; no object stored"
	}
	return detail, good
}

// uploadRaw posts archive to the project's import and answers the status
// and the refusal's reason, whatever the status.
func (c *client) uploadRaw(id int64, filename string, archive []byte) (int, string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("archive", filename)
	if err != nil {
		return 0, "", err
	}
	fw.Write(archive)
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/projects/%d/import", c.Base, id), &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("X-CSRF-Token", c.CSRF)
	req.Header.Set("Accept", "application/json")
	resp, err := c.HC.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var p struct {
		Reason string `json:"reason"`
	}
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &p)
	return resp.StatusCode, p.Reason, nil
}
