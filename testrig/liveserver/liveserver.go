// Package liveserver builds the atelier binary, runs it as a child process
// with its own embedded PostgreSQL below a temporary folder, and signs in to
// it over real HTTP: what the commands that measure a whole server (abuse,
// bench) stand on.
package liveserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// AdminPassword is the first site admin's password on every server started
// here; the account is named "admin".
const AdminPassword = "live-admin-password-1"

// Build builds the server, without the race detector whatever the tests
// use, into dir/atelier and returns that path. The build's output goes to
// logw.
func Build(dir string, logw io.Writer) (string, error) {
	bin := filepath.Join(dir, "atelier")
	build := exec.Command("go", "build", "-o", bin, "atelier")
	build.Stdout, build.Stderr = logw, logw
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("liveserver: build server: %w", err)
	}
	return bin, nil
}

// Server is a running atelier process.
type Server struct {
	cmd  *exec.Cmd
	dir  string
	Addr string // host:port it listens on
	Base string // http://Addr
}

// Start builds the server into a fresh temporary folder and runs it there
// with env added to this process's environment (NAME=value entries), then
// waits for /healthz. The build's output goes to logw; the server's own log
// to server.log in that folder, named in the error when it does not start.
func Start(logw io.Writer, env ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "atelier-live-")
	if err != nil {
		return nil, err
	}
	// The embedded PostgreSQL runs as the postgres account, which must pass
	// through every parent of the data folder.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	bin, err := Build(dir, logw)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o711); err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr, "ATELIER_ADMIN_PASSWORD="+AdminPassword)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, dir: dir, Addr: addr, Base: "http://" + addr}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.Base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.Stop()
	return nil, fmt.Errorf("liveserver: server did not answer /healthz within 3 minutes (log in %s)", logf.Name())
}

// FreeAddr is a loopback host:port nothing listens on now, for a server
// this process starts next.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("liveserver: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Stop ends the server with SIGINT so it stops its PostgreSQL, then removes
// its folder.
// Pid is the server process's id, for reading what it uses.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	_ = RemoveData(s.dir)
}

// Client is one signed-in person: a cookie jar and the CSRF token its pages
// carry.
type Client struct {
	Base string
	HC   *http.Client
	CSRF string
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// SignIn signs name in and reads the CSRF token from /projects.
func SignIn(base, name, password string) (*Client, error) {
	jar, _ := cookiejar.New(nil)
	c := &Client{Base: base, HC: &http.Client{Jar: jar, Timeout: 10 * time.Minute}}
	u, _ := url.Parse(base)
	anon := strings.Repeat("a", 40)
	jar.SetCookies(u, []*http.Cookie{{Name: "atelier_csrf", Value: anon, Path: "/"}})
	c.CSRF = anon
	if err := c.Post("/login", url.Values{"username": {name}, "password": {password}}); err != nil {
		return nil, fmt.Errorf("liveserver: sign in: %w", err)
	}
	resp, err := c.HC.Get(base + "/projects")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	m := csrfMeta.FindSubmatch(page)
	if m == nil {
		return nil, errors.New("liveserver: no csrf token on /projects after sign-in")
	}
	c.CSRF = string(m[1])
	return c, nil
}

// CookieHeader is the Cookie header a request outside HC would send.
func (c *Client) CookieHeader() string {
	u, _ := url.Parse(c.Base)
	var parts []string
	for _, ck := range c.HC.Jar.Cookies(u) {
		parts = append(parts, ck.Name+"="+ck.Value)
	}
	return strings.Join(parts, "; ")
}

// Do sends req with the CSRF token, asking for JSON; a status of 400 or
// more is an error that quotes the start of the body.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("X-CSRF-Token", c.CSRF)
	req.Header.Set("Accept", "application/json")
	resp, err := c.HC.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	return resp, nil
}

// PostJSON posts form to path and decodes the JSON answer into out (nil:
// the answer is read and dropped).
func (c *Client) PostJSON(path string, form url.Values, out any) error {
	req, _ := http.NewRequest(http.MethodPost, c.Base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Post posts form to path and drops the answer.
func (c *Client) Post(path string, form url.Values) error { return c.PostJSON(path, form, nil) }

// CreateProject makes a project and answers its id.
func (c *Client) CreateProject(name string) (int64, error) {
	var p struct {
		ID int64 `json:"id"`
	}
	if err := c.PostJSON("/projects", url.Values{"name": {name}}, &p); err != nil {
		return 0, fmt.Errorf("liveserver: create project: %w", err)
	}
	if p.ID == 0 {
		return 0, errors.New("liveserver: create project: no id in the answer")
	}
	return p.ID, nil
}

// Import uploads archive (a .tar.gz or .zip, told by filename) into the
// project and waits for the import to end.
func (c *Client) Import(id int64, filename string, archive []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("archive", filename)
	if err != nil {
		return err
	}
	if _, err := fw.Write(archive); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/projects/%d/import", c.Base, id), &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("liveserver: import: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Percentile is the p-th percentile of d (0 when d is empty), for the
// figures the suites print.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
