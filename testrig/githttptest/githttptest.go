// Package githttptest serves git repositories over smart HTTP for tests:
// the real git http-backend behind Basic authentication, counting every
// request, and able to hold one open so a test can look at the fetch while
// it runs.
package githttptest

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Server is a git HTTP server on 127.0.0.1.
type Server struct {
	// URL is http://127.0.0.1:PORT, without credentials.
	URL string
	// Host is 127.0.0.1:PORT.
	Host string

	user, password string
	backend        http.Handler

	mu         sync.Mutex
	requests   int
	authorized int
	hold       *Hold   // the next request waits here
	holds      []*Hold // every Hold made, released at the end
}

// New serves the bare repositories in root as /<name>.git. With a user,
// every request must carry it and password in Basic authentication, else
// it is answered 401 as a real host does.
func New(t testing.TB, root, user, password string) *Server {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("githttptest: git --exec-path: %v", err)
	}
	home := t.TempDir()
	s := &Server{user: user, password: password, backend: &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(out)), "git-http-backend"),
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"HOME=" + home,
			"GIT_CONFIG_NOSYSTEM=1",
		},
	}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.mu.Lock()
		for _, h := range s.holds {
			h.Release()
		}
		s.mu.Unlock()
		srv.Close()
	})
	s.URL = srv.URL
	s.Host = strings.TrimPrefix(srv.URL, "http://")
	return s
}

// Hold is a request kept waiting.
type Hold struct {
	// Held is closed when the request has arrived and waits.
	Held    chan struct{}
	release chan struct{}
	once    sync.Once
}

// Release lets the request go on; calling it again does nothing.
func (h *Hold) Release() { h.once.Do(func() { close(h.release) }) }

// HoldNext makes the next authorized request (the next request, without a
// user) wait until the Hold is released. The test's end releases it too.
func (s *Server) HoldNext() *Hold {
	h := &Hold{Held: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.hold = h
	s.holds = append(s.holds, h)
	s.mu.Unlock()
	return h
}

// Requests is how many requests arrived, refused ones included.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Authorized is how many requests carried the right user and password.
func (s *Server) Authorized() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authorized
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	if s.user != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != s.user || p != s.password {
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		s.authorized++
	}
	hold := s.hold
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		close(hold.Held)
		select {
		case <-hold.release:
		case <-r.Context().Done():
			return
		}
	}
	s.backend.ServeHTTP(w, r)
}
