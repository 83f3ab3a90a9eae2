package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"atelier/pgembed"
	"atelier/storage"
)

// failFast bounds every request of the fault rows: one that takes longer
// counts as hung, whatever it answers.
const failFast = 5 * time.Second

// recoverWithin bounds how long the server may take to work again once
// what was away is back.
const recoverWithin = 60 * time.Second

// largeImport imports an archive of n distinct files of size bytes and
// reads one back whole.
func largeImport(c *client, n int, size int64) (string, bool) {
	id, err := c.CreateProject("abuse-import-large")
	if err != nil {
		return err.Error(), false
	}
	files := make([]archived, n)
	for i := range files {
		// At the top: an archive whose files share one folder loses it.
		files[i] = archived{name: fmt.Sprintf("large-%d.bin", i), head: fmt.Sprintf("large file %d\n", i), size: size}
	}
	start := time.Now()
	if err := c.importArchive(id, files); err != nil {
		return err.Error(), false
	}
	took := time.Since(start)
	got, err := c.rawSize(id, files[n-1].name)
	if err != nil || got != size {
		return fmt.Sprintf("%s read back as %d bytes (%v)", files[n-1].name, got, err), false
	}
	return fmt.Sprintf("imported and published in %s, read back whole", took.Round(100*time.Millisecond)), true
}

// manyFilesImport imports an archive of n small files in folders of 100
// and reads the last one back.
func manyFilesImport(c *client, n int) (string, bool) {
	id, err := c.CreateProject("abuse-import-many")
	if err != nil {
		return err.Error(), false
	}
	files := make([]archived, n)
	for i := range files {
		head := fmt.Sprintf("file %d\n", i)
		files[i] = archived{name: fmt.Sprintf("d%03d/f%05d.txt", i/100, i), head: head, size: int64(len(head))}
	}
	start := time.Now()
	if err := c.importArchive(id, files); err != nil {
		return err.Error(), false
	}
	took := time.Since(start)
	last := files[n-1]
	got, status, err := c.get(fmt.Sprintf("/projects/%d/code/raw?path=%s", id, url.QueryEscape(last.name)))
	if err != nil || status != http.StatusOK || got != last.head {
		return fmt.Sprintf("%s read back as %d %q (%v)", last.name, status, got, err), false
	}
	return fmt.Sprintf("imported and published in %s", took.Round(100*time.Millisecond)), true
}

// databaseRestart stops PostgreSQL under a client that saves an edit and
// reads the previous one back every 50 ms, keeps it down for outage, and
// starts it again. Requests must fail fast with 503 database_unavailable,
// the server must recover by itself, and every save it acknowledged must
// read back byte for byte.
func databaseRestart(s *server, c *client, outage time.Duration) (string, bool) {
	id, err := c.CreateProject("abuse-db-restart")
	if err != nil {
		return err.Error(), false
	}
	base, err := c.openSession(id)
	if err != nil {
		return err.Error(), false
	}
	w := &editWriter{c: c, base: base, saved: map[string]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(stop) }()

	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = s.pg.Stop(ctx)
	cancel()
	if err != nil {
		close(stop)
		<-done
		return "stop PostgreSQL: " + err.Error(), false
	}
	time.Sleep(outage)
	if s.pg, err = pgembed.Start(context.Background(), s.pgConfig); err != nil {
		close(stop)
		<-done
		return "start PostgreSQL again: " + err.Error(), false
	}
	back := time.Now()
	recovered := w.waitSaved(back, recoverWithin)
	time.Sleep(time.Second)
	close(stop)
	<-done

	var why []string
	if recovered < 0 {
		why = append(why, fmt.Sprintf("no save succeeded within %s of PostgreSQL's return", recoverWithin))
	}
	why = append(why, w.problems()...)
	if w.unavailable.Load() == 0 {
		why = append(why, "no request saw the database down")
	}
	lost := c.verifySaved(base, w.saved)
	if lost != "" {
		why = append(why, lost)
	}
	detail := fmt.Sprintf("%d saves kept, %d answered 503 database_unavailable (slowest %s), recovered %s after PostgreSQL returned",
		len(w.saved), w.unavailable.Load(), ms(time.Duration(w.slowest.Load())), recovered.Round(10*time.Millisecond))
	if len(why) > 0 {
		return detail + "; " + strings.Join(why, "; "), false
	}
	return detail, true
}

// editWriter saves edits one after another, each to a new path with new
// content, and remembers what the server acknowledged.
type editWriter struct {
	c    *client
	base string

	mu        sync.Mutex
	saved     map[string]string // path → content, for each acknowledged save
	lastSaved time.Time
	others    []string // answers that are neither success nor 503 database_unavailable

	unavailable atomic.Int64
	slowest     atomic.Int64 // nanoseconds
}

// editPaths is how many distinct paths the writer uses, within a
// session's bound of changed paths.
const editPaths = 150

func (w *editWriter) run(stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		path := fmt.Sprintf("edits/e%03d.txt", i%editPaths)
		content := fmt.Sprintf("save %d: ünïcödé\r\ntabs\tand trailing spaces  \r\n%s\n", i, strings.Repeat("x", i%97))
		start := time.Now()
		status, reason, err := w.c.save(w.base, path, content)
		took := time.Since(start)
		if took > time.Duration(w.slowest.Load()) {
			w.slowest.Store(int64(took))
		}
		w.mu.Lock()
		switch {
		case err != nil:
			w.others = append(w.others, err.Error())
		case took > failFast:
			w.others = append(w.others, fmt.Sprintf("a save took %s", took))
		case status < 300:
			w.saved[path] = content
			w.lastSaved = time.Now()
		case status == http.StatusServiceUnavailable && reason == "database_unavailable":
			w.unavailable.Add(1)
		default:
			w.others = append(w.others, fmt.Sprintf("a save answered %d %s", status, reason))
		}
		w.mu.Unlock()
		// A read of what was just saved goes through the database too.
		if got, status, err := w.c.get(w.base + "/file?path=" + url.QueryEscape(path)); err == nil && status == http.StatusOK {
			w.mu.Lock()
			if want, ok := w.saved[path]; ok && got != want {
				w.others = append(w.others, fmt.Sprintf("%s read back %q, saved %q", path, got, want))
			}
			w.mu.Unlock()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSaved waits until a save succeeds after since and returns how long
// after since that was, or -1 after within.
func (w *editWriter) waitSaved(since time.Time, within time.Duration) time.Duration {
	for time.Since(since) < within {
		w.mu.Lock()
		last := w.lastSaved
		w.mu.Unlock()
		if last.After(since) {
			return last.Sub(since)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

func (w *editWriter) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.others) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d wrong answers (first: %s)", len(w.others), w.others[0])}
}

// verifySaved reads every saved path back and says what differs.
func (c *client) verifySaved(base string, saved map[string]string) string {
	bad := 0
	var first string
	for path, want := range saved {
		got, status, err := c.get(base + "/file?path=" + url.QueryEscape(path))
		if err != nil || status != http.StatusOK || got != want {
			bad++
			if first == "" {
				first = fmt.Sprintf("%s: %d %q (%v)", path, status, got, err)
			}
		}
	}
	if bad > 0 {
		return fmt.Sprintf("%d of %d saved edits lost or changed (first: %s)", bad, len(saved), first)
	}
	return ""
}

// objectStoreStop stops MinIO under reads of the Code page and an import
// into another project, keeps it down for outage and starts it again. The
// reads must keep answering from git, the import must succeed, and its
// publish must land in MinIO once it is back.
func objectStoreStop(s *server, c *client, outage time.Duration) (string, bool) {
	id, err := c.CreateProject("abuse-s3-read")
	if err != nil {
		return err.Error(), false
	}
	const readme = "read from git while the object store is away\n"
	if err := c.importArchive(id, []archived{{name: "README.md", head: readme, size: int64(len(readme))}}); err != nil {
		return err.Error(), false
	}
	late, err := c.CreateProject("abuse-s3-late")
	if err != nil {
		return err.Error(), false
	}
	if err := s.minio.Stop(); err != nil {
		return err.Error(), false
	}
	var why []string
	reads, slowest := 0, time.Duration(0)
	const lateFile = "imported while the object store was away\n"
	imported := make(chan error, 1)
	go func() {
		imported <- c.importArchive(late, []archived{{name: "late.txt", head: lateFile, size: int64(len(lateFile))}})
	}()
	for end := time.Now().Add(outage); time.Now().Before(end); {
		for _, path := range []string{"/code", "/code/tree", "/code/raw?path=README.md"} {
			start := time.Now()
			got, status, err := c.get(fmt.Sprintf("/projects/%d%s", id, path))
			took := time.Since(start)
			slowest = max(slowest, took)
			reads++
			switch {
			case err != nil || status != http.StatusOK:
				why = append(why, fmt.Sprintf("%s answered %d (%v)", path, status, err))
			case took > failFast:
				why = append(why, fmt.Sprintf("%s took %s", path, took))
			case strings.HasPrefix(path, "/code/raw") && got != readme:
				why = append(why, fmt.Sprintf("%s read %q", path, got))
			}
		}
		if len(why) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := <-imported; err != nil {
		why = append(why, "the import while MinIO was down: "+err.Error())
	}
	if err := s.minio.Restart(); err != nil {
		return "restart MinIO: " + err.Error(), false
	}
	back := time.Now()
	landed, err := s.waitPublished(late, recoverWithin)
	if err != nil {
		why = append(why, err.Error())
	}
	detail := fmt.Sprintf("%d Code page reads answered from git (slowest %s); the import's publish landed %s after MinIO returned",
		reads, ms(slowest), landed.Sub(back).Round(100*time.Millisecond))
	if len(why) > 0 {
		return detail + "; " + strings.Join(why, "; "), false
	}
	return detail, true
}

// waitPublished waits until the project's canonical commit is recorded as
// published and its root tree is in MinIO, and returns when that was seen.
func (s *server) waitPublished(project int64, within time.Duration) (time.Time, error) {
	ctx := context.Background()
	store, err := storage.NewS3(ctx, s.minio.Config(bucket))
	if err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(within)
	for {
		var root string
		err := s.scan(ctx, `SELECT pc.root_tree FROM projects p JOIN published_commits pc ON pc.commit_sha = p.canonical_commit WHERE p.id = $1`, []any{project}, &root)
		if err == nil {
			rc, err := store.Get(ctx, "trees/"+root)
			if err != nil {
				return time.Time{}, fmt.Errorf("the commit is recorded as published but its root tree is not in MinIO: %w", err)
			}
			rc.Close()
			return time.Now(), nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the import's commit was not published within %s of MinIO's return", within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// scan runs one query on the server's database and scans its row into
// dest; pgx.ErrNoRows when there is none.
func (s *server) scan(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, s.pg.DSN("atelier"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// serverKill kills the server (every instance) with SIGKILL while a one-shot command and a
// shell of one session run, then starts it again. The abandoned sandbox
// reservations must be settled, the shell's stream must say it was lost,
// the session and its edits must be intact, no process of the session's
// uid may survive the restart, and the next command must run in a
// checkout rebuilt from the base and the edits, without what the killed
// command half wrote.
func serverKill(s *server, c *client) (string, bool) {
	id, err := c.CreateProject("abuse-kill")
	if err != nil {
		return err.Error(), false
	}
	const base0 = "base file\n"
	if err := c.importArchive(id, []archived{{name: "base.txt", head: base0, size: int64(len(base0))}}); err != nil {
		return err.Error(), false
	}
	base, err := c.openSession(id)
	if err != nil {
		return err.Error(), false
	}
	const kept = "an edit saved before the crash\r\n"
	if status, reason, err := c.save(base, "kept.txt", kept); err != nil || status >= 300 {
		return fmt.Sprintf("save: %d %s %v", status, reason, err), false
	}
	tid, err := c.openShell(base, "sleep 611\n")
	if err != nil {
		return err.Error(), false
	}
	// The command writes part of a file, then waits to be killed.
	go func() {
		_, _ = c.runCommand(base, "head -c 100000 /dev/zero > half.txt; sleep 612")
	}()
	cmdProc, err := waitProcess("sleep 612", 30*time.Second)
	if err != nil {
		return err.Error(), false
	}
	shellProc, err := waitProcess("sleep 611", 30*time.Second)
	if err != nil {
		return err.Error(), false
	}
	uid := processUID(cmdProc)
	if uid < 0 || processUID(shellProc) != uid {
		return fmt.Sprintf("the command (uid %d) and the shell (uid %d) run as different users", uid, processUID(shellProc)), false
	}
	ctx := context.Background()
	var held int64
	if err := s.scan(ctx, `SELECT count(*) FROM sandbox_reservations WHERE project_id = $1`, []any{id}, &held); err != nil || held < 2 {
		return fmt.Sprintf("before the kill: %d reservations held (%v), want one for the command and one for the shell", held, err), false
	}

	s.killAll()
	survivedKill := len(processesOf(uid))
	if err := s.launchAll(); err != nil {
		return "restart: " + err.Error(), false
	}

	var why []string
	if left := processesOf(uid); len(left) > 0 {
		why = append(why, fmt.Sprintf("%d processes of uid %d survived the restart (%s)", len(left), uid, describe(left)))
	}
	var open int64
	if err := s.scan(ctx, `SELECT count(*) FROM sandbox_reservations WHERE project_id = $1`, []any{id}, &open); err != nil || open != 0 {
		why = append(why, fmt.Sprintf("%d reservations still held after the restart (%v)", open, err))
	}
	if body, err := c.shellStream(base, tid); err != nil || !strings.Contains(body, `"lost":true`) {
		why = append(why, fmt.Sprintf("the shell's stream after the restart: %q %v", body, err))
	}
	again, err := c.openSession(id)
	if err != nil || again != base {
		why = append(why, fmt.Sprintf("the session after the restart: %s, want %s (%v)", again, base, err))
	}
	if got, status, err := c.get(base + "/file?path=kept.txt"); err != nil || status != http.StatusOK || got != kept {
		why = append(why, fmt.Sprintf("the saved edit after the restart: %d %q (%v)", status, got, err))
	}
	res, err := c.runCommand(base, "cat kept.txt base.txt; ls")
	switch {
	case err != nil:
		why = append(why, "a command after the restart: "+err.Error())
	case res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, kept+base0) || strings.Contains(res.Stdout, "half.txt"):
		why = append(why, fmt.Sprintf("the checkout after the restart: exit %d, %q", res.ExitCode, res.Stdout))
	}
	detail := fmt.Sprintf("%d reservations settled, %d processes of the session outlived the server and were killed at start, shell reported lost, edits and checkout intact", held, survivedKill)
	if len(why) > 0 {
		return detail + "; " + strings.Join(why, "; "), false
	}
	return detail, true
}

// waitProcess returns the pid of the process whose command line contains
// marker, once there is one.
func waitProcess(marker string, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
				return pid, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("no process %q within %s", marker, within)
}

// processUID is the real uid of pid, -1 when it is gone.
func processUID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	return -1
}

// processesOf lists the live processes whose real uid is uid. A zombie
// is left out: it has ended and holds nothing but its entry until its
// parent (here the machine's init, which inherited it from the killed
// server) collects it.
func processesOf(uid int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && processUID(pid) == uid && processState(pid) != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processState is the state letter of pid (R, S, Z …), "" when it is gone.
func processState(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// After the command's name, which may hold spaces and parentheses.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// get reads path's body, whatever the status.
func (c *client) get(path string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*failFast)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	resp, err := c.HC.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), resp.StatusCode, err
}

// rawSize downloads path of project id and returns its length.
func (c *client) rawSize(id int64, path string) (int64, error) {
	resp, err := c.HC.Get(fmt.Sprintf("%s/projects/%d/code/raw?path=%s", c.Base, id, url.QueryEscape(path)))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("raw %s: %s", path, resp.Status)
	}
	return io.Copy(io.Discard, resp.Body)
}

// openSession opens (or finds) the account's edit session on project id
// and returns its URL path.
func (c *client) openSession(id int64) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/projects/%d/sessions", c.Base, id), nil)
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("abuse: open session: %w", err)
	}
	defer resp.Body.Close()
	var s struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.ID == "" {
		return "", fmt.Errorf("abuse: open session: no id in the answer (%v)", err)
	}
	return fmt.Sprintf("/projects/%d/sessions/%s", id, s.ID), nil
}

// save stores content at path in the session as the editor does, and
// returns the status with the problem's reason.
func (c *client) save(base, path, content string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*failFast)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, c.Base+base+"/file?path="+url.QueryEscape(path), strings.NewReader(content))
	req.Header.Set("X-CSRF-Token", c.CSRF)
	req.Header.Set("Accept", "application/json")
	resp, err := c.HC.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var problem struct {
		Reason string `json:"reason"`
	}
	if resp.StatusCode >= 300 {
		_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&problem)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, problem.Reason, nil
}

// commandResult is what the server answers for a one-shot command.
type commandResult struct {
	ExitCode int      `json:"exitCode"`
	Stdout   string   `json:"stdout"`
	Stderr   string   `json:"stderr"`
	Notes    []string `json:"notes"`
}

func (c *client) runCommand(base, command string) (*commandResult, error) {
	req, _ := http.NewRequest(http.MethodPost, c.Base+base+"/commands", strings.NewReader(url.Values{"command": {command}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r commandResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("abuse: command result: %w", err)
	}
	return &r, nil
}

// openShell opens a terminal in the session, types input into it and
// returns its id.
func (c *client) openShell(base, input string) (string, error) {
	id, _, err := c.openShellAt(base, input)
	return id, err
}

// openShellAt is openShell that also answers the sequence number the
// terminal's next input takes.
func (c *client) openShellAt(base, input string) (string, uint64, error) {
	req, _ := http.NewRequest(http.MethodPost, c.Base+base+"/terminals", strings.NewReader(url.Values{"cols": {"80"}, "rows": {"24"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("abuse: open shell: %w", err)
	}
	defer resp.Body.Close()
	var t struct {
		ID      string `json:"id"`
		NextSeq uint64 `json:"nextSeq"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil || t.ID == "" {
		return "", 0, fmt.Errorf("abuse: open shell: no id in the answer (%v)", err)
	}
	if err := c.typeInto(c.Base, base, t.ID, t.NextSeq, input); err != nil {
		return "", 0, err
	}
	return t.ID, t.NextSeq + 1, nil
}

// typeInto sends input to a terminal as the keystrokes numbered seq,
// through the instance at origin.
func (c *client) typeInto(origin, base, tid string, seq uint64, input string) error {
	req, _ := http.NewRequest(http.MethodPost, origin+base+"/terminals/"+tid+"/input", strings.NewReader(input))
	req.Header.Set("X-Input-Seq", strconv.FormatUint(seq, 10))
	in, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("abuse: shell input: %w", err)
	}
	in.Body.Close()
	return nil
}

// shellStream reads what the shell's stream says, for at most a second.
func (c *client) shellStream(base, tid string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+base+"/terminals/"+tid+"/stream", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HC.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("stream: %s", resp.Status)
	}
	return string(body), nil
}

// describe names processes by state and command line.
func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		parts = append(parts, fmt.Sprintf("%d %s %q", pid, processState(pid), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return strings.Join(parts, ", ")
}

// verifyKill submits a Change whose check is running when the server
// (every instance) is killed: after the restart the Change is verified again and ends
// verified, with one piece of evidence, and canonical has not moved.
func verifyKill(s *server, c *client) (string, bool) {
	id, err := c.CreateProject("abuse-verify")
	if err != nil {
		return err.Error(), false
	}
	const base0 = "base file\n"
	if err := c.importArchive(id, []archived{{name: "base.txt", head: base0, size: int64(len(base0))}}); err != nil {
		return err.Error(), false
	}
	// The duration marks the check's process among every other sleep.
	if err := c.Post(fmt.Sprintf("/projects/%d/settings", id), url.Values{"checkCommand": {"sleep 4.613 && grep -q checked base.txt"}}); err != nil {
		return "settings: " + err.Error(), false
	}
	base, err := c.openSession(id)
	if err != nil {
		return err.Error(), false
	}
	if status, reason, err := c.save(base, "base.txt", "checked\n"); err != nil || status >= 300 {
		return fmt.Sprintf("save: %d %s %v", status, reason, err), false
	}
	var submitted struct {
		ChangeID int64 `json:"changeId"`
	}
	if err := c.PostJSON(base+"/submit", url.Values{"message": {"checked before and after a crash"}}, &submitted); err != nil {
		return "submit: " + err.Error(), false
	}
	if _, err := waitProcess("sleep 4.613", 30*time.Second); err != nil {
		return "the check never started: " + err.Error(), false
	}
	ctx := context.Background()
	var canonicalBefore string
	if err := s.scan(ctx, `SELECT canonical_commit FROM projects WHERE id = $1`, []any{id}, &canonicalBefore); err != nil {
		return err.Error(), false
	}

	s.killAll()
	if err := s.launchAll(); err != nil {
		return "restart: " + err.Error(), false
	}
	deadline := time.Now().Add(90 * time.Second)
	var status string
	var evidence int64
	for {
		if err := s.scan(ctx, `SELECT status, (SELECT count(*) FROM evidence WHERE change_id = changes.id) FROM changes WHERE id = $1`,
			[]any{submitted.ChangeID}, &status, &evidence); err != nil {
			return err.Error(), false
		}
		if status != "verifying" && status != "composed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var canonicalAfter string
	if err := s.scan(ctx, `SELECT canonical_commit FROM projects WHERE id = $1`, []any{id}, &canonicalAfter); err != nil {
		return err.Error(), false
	}
	detail := fmt.Sprintf("change %s with %d evidence after the restart", status, evidence)
	if status != "verified" || evidence != 1 || canonicalAfter != canonicalBefore {
		return fmt.Sprintf("%s, want verified with 1; canonical %.12s → %.12s", detail, canonicalBefore, canonicalAfter), false
	}
	return detail + ", canonical unmoved until a release", true
}
