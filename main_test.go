package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"atelier/pgembed/pgtest"
	"atelier/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	pgtest.Main(m)
}

// build compiles the atelier binary once per test.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "atelier")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with CGO_ENABLED=0: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dataDir is a fresh data dir whose ancestors the PostgreSQL account can
// pass through (t.TempDir is 0700 when we are root).
func dataDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "atelier-main-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(base, "data")
}

// The embedded default end to end, as a person runs it: the binary starts
// its own PostgreSQL, prints where it serves, answers /healthz, lets
// `user add` in beside it, and a Ctrl-C stops PostgreSQL too.
func TestServeEmbeddedAndStop(t *testing.T) {
	bin := build(t)
	data, addr := dataDir(t), freeAddr(t)
	env := append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr, "DATABASE_URL=", "ATELIER_ADMIN_PASSWORD=")

	srv := exec.Command(bin)
	srv.Env = env
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill() })

	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var sawPassword, sawServing bool
	deadline := time.After(90 * time.Second)
	for !sawServing {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the server exited early:\n%s", stderr.String())
			}
			sawPassword = sawPassword || strings.Contains(line, "sign in as admin with password")
			sawServing = strings.Contains(line, "serving on http://"+addr)
		case <-deadline:
			t.Fatalf("no 'serving on' line within 90 s:\n%s", stderr.String())
		}
	}
	if !sawPassword {
		t.Fatal("the first start did not print the generated admin password")
	}

	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", res, err)
	}
	res.Body.Close()

	add := exec.Command(bin, "user", "add", "carol", "--admin")
	add.Env = env
	add.Stdin = strings.NewReader("carol-password\n")
	if out, err := add.CombinedOutput(); err != nil || !strings.Contains(string(out), "added site admin carol") {
		t.Fatalf("user add beside the running server: %v\n%s", err, out)
	}

	pid := postmasterPID(t, data)
	if err := srv.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server did not exit cleanly: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not stop within 60 s of SIGINT")
	}
	// The server has exited, so its log is all in.
	if !strings.Contains(stderr.String(), "creating the PostgreSQL cluster (first start") {
		t.Fatalf("the first start did not say what it waits for:\n%s", stderr.String())
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("PostgreSQL (pid %d) outlived the server", pid)
	}
	if _, err := os.Stat(filepath.Join(data, "postgres", "data", "postmaster.pid")); !os.IsNotExist(err) {
		t.Fatalf("postmaster.pid left behind: %v", err)
	}

	// carol was stored: a second start on the same data dir lets her in and
	// prints no new admin password.
	login := exec.Command(bin, "user", "add", "carol")
	login.Env = env
	login.Stdin = strings.NewReader("another-password\n")
	if out, err := login.CombinedOutput(); err == nil || !strings.Contains(string(out), "taken") {
		t.Fatalf("carol did not survive the restart: %v\n%s", err, out)
	}
}

// With DATABASE_URL set the server uses that database and starts nothing.
func TestServeWithDatabaseURL(t *testing.T) {
	bin := build(t)
	data, addr := dataDir(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := exec.CommandContext(ctx, bin)
	srv.Env = append(os.Environ(), "ATELIER_DATA="+data, "ATELIER_ADDR="+addr,
		"DATABASE_URL="+pgtest.NewDatabase(t, ""), "ATELIER_ADMIN_PASSWORD=first-admin-pw")
	var out bytes.Buffer
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no healthy server within 60 s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Process.Signal(os.Interrupt)
	if err := srv.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(data, "postgres")); !os.IsNotExist(err) {
		t.Fatalf("an embedded cluster was made although DATABASE_URL was set: %v", err)
	}
	if strings.Contains(out.String(), "sign in as admin with password") {
		t.Fatal("the password from ATELIER_ADMIN_PASSWORD was printed")
	}
}

func postmasterPID(t *testing.T, data string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "postgres", "data", "postmaster.pid"))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// With no PostgreSQL binaries and no DATABASE_URL the server exits with one
// line saying what to install or set. The binaries are hidden in a private
// mount namespace, which needs root.
func TestNoBinariesExplainsItself(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: hiding the installed PostgreSQL binaries needs root (a private mount namespace)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed to hide the PostgreSQL binaries")
	}
	bin := build(t)
	script := `set -e
for d in /usr/lib/postgresql /usr/local/pgsql; do if [ -d "$d" ]; then /bin/mount -t tmpfs none "$d"; fi; done
exec "$0"`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, bin)
	cmd.Env = []string{"PATH=/nonexistent", "ATELIER_DATA=" + dataDir(t), "ATELIER_ADDR=" + freeAddr(t)}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the server started without PostgreSQL binaries:\n%s", out)
	}
	text := strings.TrimSpace(string(out))
	if strings.Count(text, "\n") != 0 || !strings.Contains(text, "apt-get install postgresql") || !strings.Contains(text, "DATABASE_URL") {
		t.Fatalf("want one line naming what to install or set, got:\n%s", text)
	}
}
