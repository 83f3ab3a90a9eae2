//go:build kube_e2e

package kube

// The suite for a real cluster, which no machine of ours runs:
//
//	KUBECONFIG=~/.kube/config ATELIER_KUBE_E2E_IMAGE=<registry>/atelier-sandbox:<tag> \
//	  go test -tags kube_e2e -run E2E -v ./sandbox/kube/
//
// against a cluster whose network plugin enforces NetworkPolicies, with
// deploy/kubernetes applied (the namespace, ATELIER_KUBE_E2E_NAMESPACE or
// atelier-sandbox, and a Role the caller's credentials may use) and the
// image of deploy/kubernetes/Dockerfile.sandbox where the cluster pulls
// from. test.sh vets it, so it builds with the code it tests.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"

	"atelier/sandbox"
)

func e2eProvider(t *testing.T) *Provider {
	t.Helper()
	image := os.Getenv("ATELIER_KUBE_E2E_IMAGE")
	if image == "" {
		t.Fatal("ATELIER_KUBE_E2E_IMAGE must name the sandbox image the cluster pulls")
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		t.Fatalf("KUBECONFIG: %v", err)
	}
	ns := os.Getenv("ATELIER_KUBE_E2E_NAMESPACE")
	if ns == "" {
		ns = "atelier-sandbox"
	}
	p, err := New(Config{Namespace: ns, Image: image, PoliciesEnforced: true}, rc, nil, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// reaches says whether a command in the session opens a TCP connection
// to host:port within three seconds.
func reaches(t *testing.T, p *Provider, s sandbox.Session, host string, port int) bool {
	t.Helper()
	res, err := p.Run(t.Context(), s, sandbox.Command{Argv: sandbox.CommandArgv(
		fmt.Sprintf("timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d' && echo REACHED", host, port))})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(res.Stdout), "REACHED")
}

// A session denied the network and one allowed it, each in its pod: the
// base, a command, a change found, a shell, what each may reach, and the
// pods gone once the sessions end.
func TestE2ESessionsInPods(t *testing.T) {
	p := e2eProvider(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	stamp := time.Now().Format("150405")
	deny := sandbox.Session{ID: "e2e-deny-" + stamp, ProjectID: 1, Network: sandbox.Deny}
	allow := sandbox.Session{ID: "e2e-allow-" + stamp, ProjectID: 1, Network: sandbox.Allow}
	for _, s := range []sandbox.Session{deny, allow} {
		t.Cleanup(func() { p.End(context.Background(), s) })
		if _, err := p.Prepare(ctx, s, tarBase{"a.txt": "from the base\n"}); err != nil {
			t.Fatalf("%s: %v", s.ID, err)
		}
	}

	res, err := p.Run(ctx, deny, sandbox.Command{Argv: sandbox.CommandArgv("cat a.txt; echo new > b.txt; id -u")})
	if err != nil || !strings.HasPrefix(string(res.Stdout), "from the base\n") || strings.Contains(string(res.Stdout), "\n0\n") {
		t.Fatalf("a command: %+v %v", res, err)
	}
	// A command that ends every process it may signal, its exec'd helper
	// among them, still answers: its container's main process runs it and
	// holds the exec stream's output, which the runtime keeps open.
	res, err = p.Run(ctx, deny, sandbox.Command{Argv: sandbox.CommandArgv("kill -9 -1; sleep 1; echo done")})
	if err != nil || string(res.Stdout) != "done\n" || res.ExitCode != 0 {
		t.Fatalf("a command that kills its helper: %+v %v", res, err)
	}
	found := map[string]bool{}
	if err := p.Changed(ctx, deny, 8, func(e sandbox.Entry) error { found[e.Path] = true; return nil }); err != nil || !found["b.txt"] || found["a.txt"] {
		t.Fatalf("changed: %v %v", found, err)
	}

	// The metadata service and the private ranges stay out of reach of
	// both; the internet only of the session allowed it.
	for _, s := range []sandbox.Session{deny, allow} {
		for _, addr := range []struct {
			host string
			port int
		}{{"169.254.169.254", 80}, {"10.0.0.1", 443}, {"192.168.0.1", 443}} {
			if reaches(t, p, s, addr.host, addr.port) {
				t.Errorf("%s reached %s", s.ID, addr.host)
			}
		}
	}
	if reaches(t, p, deny, "1.1.1.1", 443) {
		t.Error("a session denied the network reached the internet")
	}
	if !reaches(t, p, allow, "1.1.1.1", 443) {
		t.Error("a session allowed the network did not reach the internet")
	}

	console, err := p.Start(ctx, deny, 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	console.Write([]byte("echo sum-$((40+2))\n"))
	seen := make(chan bool, 1)
	go func() {
		var out strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := console.Read(buf)
			out.Write(buf[:n])
			if strings.Contains(out.String(), "sum-42") {
				seen <- true
				return
			}
			if err != nil {
				seen <- false
				return
			}
		}
	}()
	select {
	case ok := <-seen:
		if !ok {
			t.Fatal("the shell ended without its answer")
		}
	case <-time.After(time.Minute):
		t.Fatal("no answer from the shell")
	}
	if err := console.Kill(); err != nil {
		t.Fatal(err)
	}

	for _, s := range []sandbox.Session{deny, allow} {
		if err := p.End(ctx, s); err != nil {
			t.Fatal(err)
		}
		for {
			// Gone, not only being deleted.
			pods, err := p.cluster.listPods(ctx, labels.Set{labelSession: sessionKey(s.ID)})
			if err == nil && len(pods) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the pod of %s outlived its session", s.ID)
			}
			time.Sleep(time.Second)
		}
	}
}
