package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"atelier/sandbox/kube"
	"atelier/testrig/dbtest"
	"atelier/testrig/liveserver"
	"atelier/testrig/wait"
)

// instanceEnv makes the test binary an Atelier instance whose sessions'
// code runs in the rig's pods, configured by the JSON of an instanceSpec:
// a process of its own, which TestAnInstanceRunsUnprivilegedWithPods
// starts as a user other than root, as a cluster's Deployment runs it.
const instanceEnv = "ATELIER_TEST_INSTANCE"

type instanceSpec struct {
	DSN, Data, Addr string
	ExecHost        string // the rig's exec server
	Kube            kube.Config
}

// runInstance serves spec until SIGTERM; its API server is a fake of
// its own (the rig's pods run as soon as they are created, whichever
// process creates them) and its exec goes to the rig's server.
func runInstance(raw string) int {
	var spec instanceSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "instance:", err)
		return 2
	}
	cfg, err := LoadConfig(func(key string) string {
		switch key {
		case "ATELIER_DATA":
			return spec.Data
		case "ATELIER_ADDR":
			return spec.Addr
		case "DATABASE_URL":
			return spec.DSN
		case "ATELIER_ADMIN_PASSWORD":
			return liveserver.AdminPassword
		}
		return ""
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "instance:", err)
		return 2
	}
	api, err := newFakeCluster()
	if err != nil {
		fmt.Fprintln(os.Stderr, "instance:", err)
		return 2
	}
	cfg.Kube = &spec.Kube
	cfg.kubeRig = &kubeAccess{rest: &rest.Config{Host: spec.ExecHost}, api: api}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), io.Discard); err != nil {
		fmt.Fprintln(os.Stderr, "instance:", err)
		return 1
	}
	return 0
}

// An instance whose sessions' code runs in pods needs no root: run as a
// user of no privilege, with nothing of its own but its data folder, it
// starts, serves a session whose command runs in a pod and whose edit
// comes back from it, and stops cleanly at SIGTERM.
func TestAnInstanceRunsUnprivilegedWithPods(t *testing.T) {
	needRoot(t)
	var rig Config
	rig.Sandbox.UIDBase, rig.Sandbox.UIDCount = 4_262_000_000, 1_000_000
	onKube(t)(&rig)
	const user = 4_261_000_001 // no one's: neither root nor a pod's
	id := strconv.Itoa(user)

	// Outside t.TempDir, whose parent only root may enter.
	dir, err := os.MkdirTemp("", "atelier-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, db := filepath.Join(dir, "data"), filepath.Join(dir, "db")
	for _, d := range []string{data, db} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, user, user); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary's own folder is root's alone.
	bin := filepath.Join(dir, "server.test")
	if err := copyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	addr, err := liveserver.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(instanceSpec{DSN: reachableDSN(t, dbtest.DSN(t), db, user), Data: data, Addr: addr,
		ExecHost: rig.kubeRig.rest.Host, Kube: *rig.Kube})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	cmd := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "--", bin, "-test.run=^$")
	cmd.Env = []string{instanceEnv + "=" + string(spec), "HOME=" + data, "PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	base := "http://" + addr
	wait.For(t, wait.Long, "the unprivileged instance to answer", func() bool {
		res, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !regexp.MustCompile(`(?m)^Uid:\s+` + id + `\s+` + id + `\s+` + id + `\s+` + id + `$`).Match(status) {
		t.Fatalf("the instance does not run as %s alone:\n%s", id, status)
	}

	admin, err := liveserver.SignIn(base, "admin", liveserver.AdminPassword)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	project, err := admin.CreateProject("unprivileged")
	if err != nil {
		t.Fatal(err)
	}
	var session struct {
		ID string `json:"id"`
	}
	if err := admin.PostJSON("/projects/"+itoa(project)+"/sessions", nil, &session); err != nil || session.ID == "" {
		t.Fatalf("open a session: %+v %v\n%s", session, err, logs)
	}
	path := "/projects/" + itoa(project) + "/sessions/" + session.ID
	var out commandJSON
	if err := admin.PostJSON(path+"/commands", url.Values{"command": {"echo from-a-pod > made.txt; id -u"}}, &out); err != nil ||
		out.ExitCode != 0 || strings.TrimSpace(out.Stdout) == "0" || strings.TrimSpace(out.Stdout) == id {
		t.Fatalf("a command in a pod: %+v %v\n%s", out, err, logs)
	}
	req, _ := http.NewRequest(http.MethodGet, base+path+"/file?path=made.txt", nil)
	req.Header.Set("Accept", "application/json")
	res, err := admin.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "from-a-pod") {
		t.Fatalf("the command's file as an edit: %d %s", res.StatusCode, body)
	}
	admin.HC.CloseIdleConnections()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("the instance's exit: %v\n%s", err, logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the instance did not stop within a minute of SIGTERM\n%s", logs)
	}
}

// reachableDSN is dsn with its socket folder one that user reaches: the
// test's PostgreSQL keeps its socket in a folder of its own account and
// root's, and a socket in dir passes the connections on.
func reachableDSN(t *testing.T, dsn, dir string, user int) string {
	t.Helper()
	host := regexp.MustCompile(`host=(\S+)`).FindStringSubmatch(dsn)
	port := regexp.MustCompile(`port=(\d+)`).FindStringSubmatch(dsn)
	if host == nil || port == nil || strings.HasPrefix(host[1], "'") {
		t.Fatalf("a DSN this test cannot reroute: %s", dsn)
	}
	name := ".s.PGSQL." + port[1]
	l, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chown(filepath.Join(dir, name), user, user); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			go func() {
				defer c.Close()
				pg, err := net.Dial("unix", filepath.Join(host[1], name))
				if err != nil {
					return
				}
				defer pg.Close()
				go func() { _, _ = io.Copy(pg, c); pg.Close() }()
				_, _ = io.Copy(c, pg)
			}()
		}
	}()
	return strings.Replace(dsn, host[0], "host="+dir, 1)
}

func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
