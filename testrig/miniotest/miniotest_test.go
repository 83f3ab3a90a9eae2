package miniotest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"atelier/storage"
)

func TestStartAndKill(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Endpoint, "127.0.0.1:") {
		t.Errorf("endpoint %s is not on the loopback address", s.Endpoint)
	}
	cfg := s.Config("b")
	if cfg.Endpoint != s.Endpoint || cfg.Bucket != "b" || cfg.AccessKey != s.AccessKey || cfg.SecretKey != s.SecretKey || cfg.Secure {
		t.Errorf("Config = %+v", cfg)
	}
	other := Start(t)
	if other.Endpoint == s.Endpoint || other.AccessKey == s.AccessKey || other.SecretKey == s.SecretKey {
		t.Errorf("two servers share an endpoint or credentials: %+v %+v", s, other)
	}

	live := "http://" + s.Endpoint + "/minio/health/live"
	resp, err := http.Get(live)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", live, resp.Status)
	}

	s.Kill()
	s.Kill() // twice is fine
	if c, err := net.DialTimeout("tcp", s.Endpoint, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Kill", s.Endpoint)
	}
	if err := s.cmd.Process.Signal(os.Signal(nil)); err == nil {
		t.Error("the process is still there after Kill")
	}
	// The other server is untouched.
	resp, err = http.Get("http://" + other.Endpoint + "/minio/health/live")
	if err != nil {
		t.Fatalf("the other server: %v", err)
	}
	resp.Body.Close()
}

// fatalTB records a Fatal instead of failing the test, so that a test can
// check that Start fails, and how.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// startFails runs Start on a recording TB and returns its Fatal message.
func startFails(t *testing.T) string {
	t.Helper()
	tb := &fatalTB{TB: t}
	done := make(chan *Server)
	go func() {
		defer close(done)
		done <- Start(tb)
	}()
	if s := <-done; s != nil {
		t.Fatalf("Start succeeded: %+v", s)
	}
	if tb.msg == "" {
		t.Fatal("Start returned without a server and without failing")
	}
	return tb.msg
}

// Without a binary the test fails, saying how to get one; it never skips.
func TestStartWithoutBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-minio")
	t.Setenv("ATELIER_MINIO", missing)
	msg := startFails(t)
	if !strings.Contains(msg, missing) || !strings.Contains(msg, "./test.sh") {
		t.Errorf("message %q does not name %s and ./test.sh", msg, missing)
	}

	t.Setenv("ATELIER_MINIO", "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	msg = startFails(t)
	want := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "atelier", "minio", "bin", "minio")
	if !strings.Contains(msg, want) || !strings.Contains(msg, "./test.sh") {
		t.Errorf("message %q does not name %s and ./test.sh", msg, want)
	}
}

// A program that is not MinIO exits at once; Start reports that and what it
// printed rather than waiting a minute for a health check.
func TestStartBrokenBinary(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "minio")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'not a minio' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ATELIER_MINIO", fake)
	start := time.Now()
	msg := startFails(t)
	if !strings.Contains(msg, "not a minio") || !strings.Contains(msg, "exited") {
		t.Errorf("message %q does not tell that the server exited and what it printed", msg)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Start took %v to notice", elapsed)
	}
}

// A killed server comes back on its address with what it stored.
func TestRestartKeepsData(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	store, err := storage.NewS3(ctx, s.Config("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, "a", strings.NewReader("before"), 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	s.Kill()
	if _, err := store.Get(ctx, "a"); err == nil {
		t.Fatal("Get succeeded while the server was down")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	rc, err := store.Get(ctx, "a")
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "before" {
		t.Fatalf("after the restart: %q", b)
	}
}
