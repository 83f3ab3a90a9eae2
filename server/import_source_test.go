package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atelier/testrig/githttptest"
)

// sourceRepos makes a folder with one bare repository, repo.git, holding
// hello.txt, for githttptest to serve.
func sourceRepos(t *testing.T) string {
	t.Helper()
	root, work := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(work, "hello.txt"), []byte("hi\n"), 0o644)
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "add", "hello.txt"},
		{"-C", work, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "one"},
		{"clone", "-q", "--bare", work, filepath.Join(root, "repo.git")},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return root
}

// importAsync posts an import of source as c without the test's helpers,
// which may not fail a test from another goroutine.
func (c *client) importAsync(id int64, source string) <-chan string {
	done := make(chan string, 1)
	form := url.Values{"source": {source}, "csrf_token": {c.csrf}}
	go func() {
		req, _ := http.NewRequest(http.MethodPost, c.h.srv.URL+"/projects/"+itoa(id)+"/import", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		res, err := c.http.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		done <- strconv.Itoa(res.StatusCode) + " " + string(body)
	}()
	return done
}

// procsHolding lists the processes whose command line, or whose
// environment, holds secret; seen counts the command lines that hold
// mark, to show the scan saw the fetch at all.
func procsHolding(t *testing.T, secret, mark string) (found []string, seen int) {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		// Processes come and go while the scan runs; a vanished one holds
		// nothing.
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		environ, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(args, mark) {
			seen++
		}
		if strings.Contains(string(cmdline), secret) {
			found = append(found, "cmdline of "+d.Name()+": "+strings.ReplaceAll(args, secret, "<SECRET>"))
		}
		// Root reads every environment; none may hold it, root's
		// included (the credentials travel through a pipe).
		if strings.Contains(string(environ), secret) {
			found = append(found, "environ of "+d.Name()+" ("+args+")")
		}
	}
	return found, seen
}

// tablesHolding returns an error naming the first table with a row whose
// text (or a bytea's hex) holds s.
func (h *harness) tablesHolding(s string) error {
	return h.store.Exec(context.Background(), `DO $$
DECLARE r record; n bigint;
BEGIN
  FOR r IN SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema') LOOP
    EXECUTE format('SELECT count(*) FROM %I.%I t WHERE t::text LIKE %L OR t::text LIKE %L',
      r.schemaname, r.tablename, '%`+s+`%', '%`+hex.EncodeToString([]byte(s))+`%') INTO n;
    IF n > 0 THEN RAISE EXCEPTION 'table %.% holds it', r.schemaname, r.tablename; END IF;
  END LOOP;
END $$`)
}

// filesHolding lists the files below dir whose bytes hold s.
func filesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// A token in a git source travels to the host and nowhere else: not on a
// command line or in an environment while the fetch runs, not in a table,
// the log, a page or the repository afterwards.
func TestImportSourceCredentialsNeverShow(t *testing.T) {
	h := newHarness(t)
	admin := h.user("root", true)
	id := admin.createProject("cloned")
	b := make([]byte, 12)
	rand.Read(b)
	secret := "S3CR3T" + hex.EncodeToString(b)
	srv := githttptest.New(t, sourceRepos(t), "alice", secret)
	source := "http://alice:" + secret + "@" + srv.Host + "/repo.git"

	hold := srv.HoldNext()
	done := admin.importAsync(id, source)
	select {
	case <-hold.Held:
	case res := <-done:
		t.Fatalf("the import ended before an authorized request: %s", res)
	case <-time.After(30 * time.Second):
		t.Fatal("no authorized request reached the git server")
	}
	found, seen := procsHolding(t, secret, srv.Host)
	if seen == 0 {
		t.Error("no process names the source while the fetch runs: the scan looked at nothing")
	}
	for _, f := range found {
		t.Errorf("while the fetch runs, %s", f)
	}
	hold.Release()
	var res string
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the import did not finish")
	}
	if !strings.HasPrefix(res, "200 ") {
		t.Fatalf("a site admin's import from loopback: %s", res)
	}
	if srv.Authorized() == 0 {
		t.Fatal("the credentials never reached the git server")
	}
	if got := decode[map[string]any](t, admin.get("/projects/"+itoa(id)+"/code/file?path=hello.txt", jsonAccept)); got["size"] != float64(3) {
		t.Fatalf("imported file: %v", got)
	}

	// The scans find what is there: the user "root" is in a table, the
	// import in the log.
	if err := h.tablesHolding("root"); err == nil {
		t.Fatal("the table scan does not find the user root")
	}
	if err := h.tablesHolding(secret); err != nil {
		t.Error(err)
	}
	if !strings.Contains(h.logs.String(), "code imported") {
		t.Fatal("the captured log lacks the import")
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Error("the log holds the secret")
	}
	for _, path := range []string{
		"/projects/" + itoa(id),
		"/projects/" + itoa(id) + "/remotes",
		"/projects/" + itoa(id) + "/code",
		"/projects/" + itoa(id) + "/code/tree",
		"/projects/" + itoa(id) + "/code/file?path=hello.txt",
	} {
		for _, hdr := range []header{nil, jsonAccept} {
			if body := readBody(admin.get(path, hdr)); strings.Contains(body, secret) {
				t.Errorf("GET %s %v shows the secret", path, hdr)
			}
		}
	}
	repo := filepath.Join(h.cfg.GitDir(), "project-"+itoa(id)+".git")
	out, err := exec.Command("git", "--git-dir", repo, "log", "--all", "--format=%B").CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	if !strings.Contains(string(out), "Import from http://"+srv.Host+"/repo.git") {
		t.Errorf("the import commit does not name its source: %s", out)
	}
	if strings.Contains(string(out), secret) {
		t.Errorf("a commit message holds the secret: %s", out)
	}
	if files := filesHolding(t, h.cfg.DataDir, secret); len(files) > 0 {
		t.Errorf("files hold the secret: %v", files)
	}
}

// Someone who is not a site admin cannot make the server fetch from
// itself or the networks behind it; nothing is contacted.
func TestImportSourceRefusesInternalAddresses(t *testing.T) {
	h := newHarness(t)
	plain := h.user("plain", false)
	id := plain.createProject("mine")
	srv := githttptest.New(t, sourceRepos(t), "", "")
	_, port, _ := strings.Cut(srv.Host, ":")
	for _, source := range []string{
		"http://127.0.0.1:" + port + "/repo.git",
		"http://user:tok@127.0.0.1:" + port + "/repo.git",
		"http://localhost:" + port + "/repo.git",
		"http://[::1]:" + port + "/repo.git",
		"http://[::ffff:127.0.0.1]:" + port + "/repo.git",
		"http://10.1.2.3/repo.git",
		"http://169.254.169.254/latest/meta-data/",
		"git://127.0.0.1:" + port + "/repo.git",
		"ssh://git@127.0.0.1:" + port + "/repo.git",
		"git@localhost:repo.git",
	} {
		start := time.Now()
		p := expectProblem(t, plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {source}}, jsonAccept), http.StatusForbidden, "source_not_allowed")
		if strings.Contains(p.Error, "tok") {
			t.Errorf("%s: the refusal shows the credentials: %s", source, p.Error)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: refused only after %s: something was contacted", source, d)
		}
	}
	if n := srv.Requests(); n != 0 {
		t.Fatalf("refused sources made %d requests", n)
	}
	// A number in disguise is no host.
	expectProblem(t, plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {"http://2130706433:" + port + "/repo.git"}}, jsonAccept), http.StatusBadRequest, "bad_source")
	if srv.Requests() != 0 {
		t.Fatal("a refused source was contacted")
	}
}

// The operator can let everyone import from networks they list.
func TestImportSourceAllowedNetworks(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ImportAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	plain := h.user("plain", false)
	id := plain.createProject("mine")
	srv := githttptest.New(t, sourceRepos(t), "alice", "tok")
	res := plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {"http://alice:tok@" + srv.Host + "/repo.git"}}, jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("import from an allowed network: %d %s", res.StatusCode, readBody(res))
	}
	if srv.Authorized() == 0 {
		t.Fatal("the credentials never reached the git server")
	}
	// Only what is listed: ::1 is loopback too, but not in 127.0.0.0/8.
	_, port, _ := strings.Cut(srv.Host, ":")
	expectProblem(t, plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {"http://[::1]:" + port + "/repo.git"}}, jsonAccept), http.StatusForbidden, "source_not_allowed")
}

func TestImportAllowCIDRsConfig(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "ATELIER_IMPORT_ALLOW_CIDRS" {
				return v
			}
			return ""
		}
	}
	cfg, err := LoadConfig(env(" 10.1.2.3/8,fd00::/8  192.168.5.0/24 "))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("192.168.5.0/24")}
	if len(cfg.ImportAllowNetworks) != len(want) {
		t.Fatalf("networks %v, want %v", cfg.ImportAllowNetworks, want)
	}
	for i := range want {
		if cfg.ImportAllowNetworks[i] != want[i] {
			t.Errorf("networks %v, want %v", cfg.ImportAllowNetworks, want)
		}
	}
	if cfg, _ := LoadConfig(env("")); cfg.ImportAllowNetworks != nil {
		t.Errorf("no setting allows %v", cfg.ImportAllowNetworks)
	}
	for _, bad := range []string{"10.0.0.1", "localhost/8", "10.0.0.0/33"} {
		if _, err := LoadConfig(env(bad)); err == nil || !strings.Contains(err.Error(), "ATELIER_IMPORT_ALLOW_CIDRS") {
			t.Errorf("ATELIER_IMPORT_ALLOW_CIDRS=%q: %v", bad, err)
		}
	}
}

// A source git cannot fetch is refused with what git said, to the person
// and in the log, so a missing repository reads as one.
func TestImportSourceFailureSaysWhy(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ImportAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	plain := h.user("plain", false)
	id := plain.createProject("mine")
	srv := githttptest.New(t, sourceRepos(t), "", "")
	source := srv.URL + "/missing.git"
	p := expectProblem(t, plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {source}}, jsonAccept),
		http.StatusBadGateway, "source_failed")
	said := "repository '" + source + "/' not found"
	if !strings.Contains(p.Error, "Git said: fatal: "+said) {
		t.Errorf("the refusal does not say what git said: %q", p.Error)
	}
	if srv.Requests() == 0 {
		t.Fatal("the git server was never asked")
	}
	// The form's stream says it too.
	res := plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {source}}, header{"Accept": "application/x-ndjson"})
	if body := readBody(res); !strings.Contains(body, said) {
		t.Errorf("the import's stream: %d %s", res.StatusCode, body)
	}
	var line string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "import fetch failed") {
			line = l
		}
	}
	if !strings.Contains(line, "exit=128") || !strings.Contains(line, said) {
		t.Errorf("the log's line: %q", line)
	}
}

// What git says of a failed fetch never holds the source's credentials,
// though the host quotes them back: they are starred out in the answer and
// the log, and a short one withholds git's words.
func TestImportSourceFailureKeepsCredentials(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ImportAllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	plain := h.user("plain", false)
	id := plain.createProject("mine")
	b := make([]byte, 12)
	rand.Read(b)
	secret := "S3CR3T" + hex.EncodeToString(b)
	// A host that asks for credentials and quotes what it was sent in its
	// refusal, which git relays as "remote:" lines.
	var quoted atomic.Int64
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, password, ok := r.BasicAuth()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		quoted.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "the token "+password+" of "+user+" may not read this repository\n")
	}))
	t.Cleanup(echo.Close)
	host := strings.TrimPrefix(echo.URL, "http://")
	for _, c := range []struct {
		name, source, hidden string
		says                 bool
	}{
		{"a token as the password", "http://deploy-bot:" + secret + "@" + host + "/repo.git", secret, true},
		{"a token as the user name", "http://" + secret + "@" + host + "/repo.git", secret, true},
		{"a token spelled with escapes", "http://deploy-bot:%53" + secret[1:] + "@" + host + "/repo.git", secret, true},
		{"a short password", "http://deploy-bot:pw12@" + host + "/repo.git", "pw12", false},
	} {
		before := quoted.Load()
		p := expectProblem(t, plain.post("/projects/"+itoa(id)+"/import", url.Values{"source": {c.source}}, jsonAccept),
			http.StatusBadGateway, "source_failed")
		if quoted.Load() == before {
			t.Fatalf("%s: the host never saw the credentials", c.name)
		}
		if strings.Contains(p.Error, c.hidden) || strings.Contains(h.logs.String(), c.hidden) {
			t.Errorf("%s: the answer or the log holds the credentials: %q", c.name, p.Error)
		}
		if says := strings.Contains(p.Error, "may not read this repository"); says != c.says {
			t.Errorf("%s: git's words shown %v, want %v: %q", c.name, says, c.says, p.Error)
		}
		if c.says && !strings.Contains(p.Error, "***") {
			t.Errorf("%s: the credentials are not starred out: %q", c.name, p.Error)
		}
	}
	if !strings.Contains(h.logs.String(), "the token *** of *** may not read this repository") {
		t.Errorf("the log lacks git's words:\n%s", h.logs.String())
	}
}
