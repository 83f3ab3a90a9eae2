// Package miniotest gives tests a real MinIO server: Start runs one on a
// free loopback port with a fresh data folder and random credentials, and
// stops it when the test ends. Launch does the same for a program that is
// not a test, and Restart brings a killed server back on its data.
//
// The server program is $ATELIER_MINIO when that is set, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/atelier/minio/bin/minio, which ./test.sh
// builds from source the first time (go install of the MinIO version pinned
// there). A test that finds neither fails; it does not skip.
package miniotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"atelier/internal/tied"
	"atelier/storage"
)

// startTimeout bounds the wait for a server to be ready. A fresh server is
// ready within a second or two; test binaries running in parallel under the
// race detector on two cores can make it much slower.
const startTimeout = 60 * time.Second

// Server is a MinIO server process that a test started.
type Server struct {
	Endpoint  string // host:port, on 127.0.0.1
	AccessKey string
	SecretKey string

	t       testing.TB // nil when Launch started it
	bin     string
	dir     string
	console string // the console's address, which MinIO insists on
	cmd     *exec.Cmd
	out     *output
	exited  chan struct{} // closed once the process has been waited for
	err     error         // how it exited; read after exited is closed
}

// Start starts a MinIO server and returns once it is ready for requests.
// The server is killed, and its data removed, when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.Kill)
	return s
}

// Launch starts a MinIO server keeping its data below dir, for a program
// that is not a test (the abuse suite); the caller ends it with Stop.
func Launch(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	// A port found free can be taken before the server binds it; try again
	// then, with another.
	for attempt := 1; ; attempt++ {
		s, err := start(bin, filepath.Join(dir, fmt.Sprint(attempt)))
		if err == nil {
			return s, nil
		}
		if attempt == 3 || !errors.Is(err, errPortTaken) {
			return nil, fmt.Errorf("miniotest: %w", err)
		}
	}
}

// Binary returns the path of the MinIO server program: $ATELIER_MINIO when
// set, else the one ./test.sh builds into the user's cache folder.
func Binary() (string, error) {
	path := os.Getenv("ATELIER_MINIO")
	from := "ATELIER_MINIO"
	if path == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("miniotest: no MinIO server: ATELIER_MINIO is not set and there is no home folder (%v); run ./test.sh, which builds one", err)
			}
			cache = filepath.Join(home, ".cache")
		}
		path = filepath.Join(cache, "atelier", "minio", "bin", "minio")
		from = "the cache"
	}
	fi, err := os.Stat(path)
	if err == nil && (fi.IsDir() || fi.Mode().Perm()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("miniotest: no MinIO server at %s (from %s): %v; run ./test.sh, which builds it there (a few minutes, once), or set ATELIER_MINIO to a minio binary", path, from, err)
	}
	return path, nil
}

var errPortTaken = errors.New("port taken")

func start(bin, dir string) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("127.0.0.1:%d", ports[0]),
		AccessKey: "test-" + randomHex(6),
		SecretKey: randomHex(20),
		bin:       bin,
		dir:       dir,
		console:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
	}
	if err := s.run(); err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, err
	}
	return s, nil
}

// run starts the server process and waits until it is ready.
func (s *Server) run() error {
	s.out = &output{}
	s.exited = make(chan struct{})
	// The certificates folder would default to ~/.minio/certs.
	s.cmd = exec.Command(s.bin, "server", "--quiet",
		"--address", s.Endpoint,
		"--console-address", s.console,
		"--certs-dir", filepath.Join(s.dir, "certs"),
		filepath.Join(s.dir, "data"))
	s.cmd.Env = append(environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	// The server dies with the test binary, even when a timeout kills it.
	exited := s.exited
	if err := tied.Start(s.cmd, syscall.SIGKILL, func(err error) {
		s.err = err
		close(exited)
	}); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	if err := s.waitReady(); err != nil {
		_ = s.Stop()
		return fmt.Errorf("%w\nserver output:\n%s", err, s.out.String())
	}
	return nil
}

// Restart starts a stopped server again on the same address, data and
// credentials, as an operator brings MinIO back after an outage.
func (s *Server) Restart() error {
	select {
	case <-s.exited:
	default:
		return errors.New("miniotest: restart: the server is still running")
	}
	if err := s.run(); err != nil {
		return fmt.Errorf("miniotest: restart: %w", err)
	}
	return nil
}

// waitReady polls the server until it is ready for S3 requests, the process
// exits, or startTimeout passes. /minio/health/live answers 200 as soon as
// the server listens, while S3 requests still fail with "Server not
// initialized yet" for a while; /minio/health/cluster answers 200 only once
// the object layer, bucket metadata and users are loaded and the drive
// accepts writes.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	ok := func(path string) bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Endpoint+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok("/minio/health/live") && ok("/minio/health/cluster") {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("minio server exited before it was ready: %v", s.err)
		case <-ctx.Done():
			return fmt.Errorf("minio server at %s not ready after %v", s.Endpoint, startTimeout)
		case <-tick.C:
		}
	}
}

// Config returns the configuration of a store on bucket of this server.
// NewS3 creates the bucket.
func (s *Server) Config(bucket string) storage.S3Config {
	return storage.S3Config{
		Endpoint:  s.Endpoint,
		Bucket:    bucket,
		AccessKey: s.AccessKey,
		SecretKey: s.SecretKey,
	}
}

// Usage counts the objects of bucket and their bytes, as the server lists
// them: what the store really holds, whatever an index says.
func (s *Server) Usage(ctx context.Context, bucket string) (objects int, size int64, err error) {
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		return 0, 0, fmt.Errorf("miniotest: %w", err)
	}
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return 0, 0, fmt.Errorf("miniotest: list %s: %w", bucket, o.Err)
		}
		objects++
		size += o.Size
	}
	return objects, size, nil
}

// Kill kills the server with SIGKILL and waits for it to exit, so that
// callers can see what happens when the object store goes away. It may be
// called more than once; the test's cleanup calls it too.
func (s *Server) Kill() {
	if err := s.Stop(); err != nil {
		s.t.Error(err)
	}
}

// Stop is Kill for a server that Launch started: it returns what went
// wrong instead of failing a test.
func (s *Server) Stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("miniotest: kill minio: %w", err)
	}
	select {
	case <-s.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("miniotest: minio (pid %d) still running 10s after SIGKILL", s.cmd.Process.Pid)
	}
}

// Output returns what the server printed so far.
func (s *Server) Output() string { return s.out.String() }

// environ is the test's environment without MINIO_ variables, which could
// change the server's set-up behind the test's back.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MINIO_") {
			env = append(env, kv)
		}
	}
	return env
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are found, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// output collects what the server prints, for error messages. MinIO's
// output is small with --quiet; only the first 64 KiB are kept anyway.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const maxOutput = 64 << 10

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := maxOutput - o.buf.Len(); room > 0 {
		o.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
