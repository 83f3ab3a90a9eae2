package server

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"atelier/models"
	"atelier/sandbox/kube"
	"atelier/testrig/kubeexec"
	"atelier/testrig/wait"
	"atelier/workbench"
)

// onKube runs the harness's sessions in pods, through the kube provider:
// its API server is client-go's fake, where a pod runs as soon as it is
// created, and its exec is served by the kubelet's own streaming code
// (testrig/kubeexec) from processes of this host, each pod's as a uid of
// its own from the harness's block, with the pod's folder seen at the
// workspace's path in a mount namespace of its own. The pods' helper is
// the plain build of the server that the jail runs, as the sandbox image
// holds it.
func onKube(t *testing.T) func(*Config) {
	return func(c *Config) {
		if sandboxHelper == "" {
			t.Skip("precondition: the pods' helper is built when the tests run as root")
		}
		// Outside t.TempDir, whose parent only root may enter: the pods'
		// users must reach the helper and the workspace's path.
		rig, err := os.MkdirTemp("", "atelier-kube-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(rig) })
		helper := filepath.Join(rig, "atelier")
		workspace := filepath.Join(rig, "workspace")
		home := filepath.Join(rig, "home")
		pods := filepath.Join(rig, "pods")
		for dir, mode := range map[string]os.FileMode{rig: 0o755, workspace: 0o755, home: 0o1777, pods: 0o711} {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(sandboxHelper)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(helper, b, 0o755); err != nil {
			t.Fatal(err)
		}
		kc := kube.Config{Namespace: "atelier-sandbox", Image: "rig", Helper: helper, Workspace: workspace, PoliciesEnforced: true}.Defaults()
		uids := &podUIDs{next: c.Sandbox.UIDBase + c.Sandbox.UIDCount/2, of: map[string]uint32{}, folders: pods}
		processes := &kubeexec.Processes{
			Dir: uids.folder, UID: uids.uid, Workspace: workspace,
			// Each container's 1 is its main process from the pod's spec.
			PIDNamespaces: true, Init: func(id string) []string { return kube.MainProcess(kc, path.Base(id)) },
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home},
		}
		rc := kubeexec.Serve(t, processes)
		t.Cleanup(processes.Close)
		c.Kube = &kc
		c.kubeRig = &kubeAccess{rest: rc, api: fakeCluster(t)}
		podRigs.Store(c.kubeRig, processes)
		t.Cleanup(func() { podRigs.Delete(c.kubeRig) })
	}
}

// podRigs holds each onKube cluster's exec runtime, by its kubeAccess.
var podRigs sync.Map

// podInput is what the pods of h's cluster have read over exec so far.
func podInput(t *testing.T, h *harness) int64 {
	t.Helper()
	p, ok := podRigs.Load(h.cfg.kubeRig)
	if !ok {
		t.Fatal("podInput: the harness does not run on the rig's cluster")
	}
	return p.(*kubeexec.Processes).Received()
}

// podBytes is what the pods of h's cluster have sent over exec so far:
// in a pod, what a capture reads crosses there, and the server's own I/O
// counters would add the rig's reaped processes to it.
func podBytes(t *testing.T, h *harness) int64 {
	t.Helper()
	p, ok := podRigs.Load(h.cfg.kubeRig)
	if !ok {
		t.Fatal("podBytes: the harness does not run on the rig's cluster")
	}
	return p.(*kubeexec.Processes).Sent()
}

// fakeCluster is client-go's fake API server, where a pod is running as
// soon as it is created.
func fakeCluster(t *testing.T) *dynamicfake.FakeDynamicClient {
	api, err := newFakeCluster()
	if err != nil {
		t.Fatal(err)
	}
	return api
}

func newFakeCluster() (*dynamicfake.FakeDynamicClient, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := networkingv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	api := dynamicfake.NewSimpleDynamicClient(scheme)
	api.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		return false, nil, unstructured.SetNestedField(u.Object, "Running", "status", "phase")
	})
	return api, nil
}

// podUIDs gives each pod of the rig a uid and a folder of its own.
type podUIDs struct {
	mu      sync.Mutex
	next    uint32
	of      map[string]uint32 // by pod
	folders string
}

// pod is the pod of a container id, "<namespace>/<pod>/<container>", and
// its uid, given the first time it is asked for with its folder.
func (p *podUIDs) pod(container string) (string, uint32, error) {
	parts := strings.Split(container, "/")
	if len(parts) != 3 || parts[1] == "" || strings.Contains(parts[1], ".") {
		return "", 0, os.ErrNotExist
	}
	pod := parts[1]
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.of[pod]
	if !ok {
		uid = p.next
		p.next++
		dir := filepath.Join(p.folders, pod)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", 0, err
		}
		if err := os.Chown(dir, int(uid), int(uid)); err != nil {
			return "", 0, err
		}
		p.of[pod] = uid
	}
	return pod, uid, nil
}

func (p *podUIDs) folder(container string) (string, error) {
	pod, _, err := p.pod(container)
	return filepath.Join(p.folders, pod), err
}

func (p *podUIDs) uid(container string) (uint32, error) {
	_, uid, err := p.pod(container)
	return uid, err
}

// sandboxProcesses lists the command lines of the processes that the
// harness's sandboxes run, wherever they run: the local jail's sessions
// and the rig's pods both take their uids from the harness's block (the
// pods its upper half). The rig's containers' main processes are not
// among them: the rig keeps them to its end, where a cluster ends them
// with their pod.
func sandboxProcesses(h *harness) []string {
	from, to := h.cfg.Sandbox.UIDBase, h.cfg.Sandbox.UIDBase+h.cfg.Sandbox.UIDCount
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		fi, err := os.Stat("/proc/" + e.Name())
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid < from || st.Uid >= to {
			continue
		}
		if h.cfg.Kube != nil && mainProcess(e.Name()) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		found = append(found, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return found
}

// mainProcess says whether the process of host pid is the 1 of its own
// PID namespace: the last of its pids in /proc/PID/status, innermost
// namespace last.
func mainProcess(pid string) bool {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) > 1 && f[len(f)-1] == "1"
		}
	}
	return false
}

// sandboxRuns reports whether a process of the harness's sandboxes runs
// the command line cmdline.
func sandboxRuns(h *harness, cmdline string) bool {
	return slices.Contains(sandboxProcesses(h), cmdline)
}

// rigPods is the rig's API for the pods of the harness's sandbox
// namespace.
func rigPods(h *harness) dynamic.ResourceInterface {
	return h.cfg.kubeRig.api.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(h.cfg.Kube.Namespace)
}

// podCheckout is the folder on this host that the rig's pod of a session
// sees at its workspace.
func podCheckout(t *testing.T, h *harness, sessionID string) string {
	t.Helper()
	dir := podFolder(t, h, sessionID)
	if dir == "" {
		t.Fatalf("no pod of session %s", sessionID)
	}
	return dir
}

// podFolder is podCheckout, or "" while the session has no pod. The pod
// is found by the session id it is annotated with: one claimed from the
// warm pool keeps its own name.
func podFolder(t *testing.T, h *harness, sessionID string) string {
	t.Helper()
	list, err := rigPods(h).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range list.Items {
		if pod.GetAnnotations()["atelier.dev/session-id"] == sessionID {
			return filepath.Join(filepath.Dir(h.cfg.Kube.Helper), "pods", pod.GetName())
		}
	}
	return ""
}

// waitNoPods waits for every pod of the rig to be deleted.
func waitNoPods(t *testing.T, h *harness) {
	t.Helper()
	wait.For(t, wait.Short, "the pods to be deleted", func() bool {
		list, err := rigPods(h).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
}

// The pods' reaper keeps exactly the sandboxes in use: open sessions'
// and the checks of Changes being verified.
func TestSandboxesInUse(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	s, base := owner.session(id)
	owner.put(base, "README.md", []byte("# in use\n"), nil)
	cid := decode[changeJSON](t, owner.submit(base, "")).ChangeID
	ctx := t.Context()
	if err := h.store.Exec(ctx, "UPDATE changes SET status = ? WHERE id = ?", models.ChangeVerifying, cid); err != nil {
		t.Fatal(err)
	}
	s2, _ := owner.session(id) // submitting ended the first session
	inUse := workbench.SandboxesInUse(h.store)
	check := "check-" + itoa(cid)
	got, err := inUse(ctx, []string{s.ID, s2.ID, check, "check-999999", "check-x", "edit_gone"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{s2.ID: true, check: true}
	for _, id := range []string{s.ID, s2.ID, check, "check-999999", "check-x", "edit_gone"} {
		if got[id] != want[id] {
			t.Fatalf("in use: %v, want %v", got, want)
		}
	}
	if err := h.store.Exec(ctx, "UPDATE changes SET status = ?, check_due = NULL WHERE id = ?", models.ChangeFailed, cid); err != nil {
		t.Fatal(err)
	}
	if got, err := inUse(ctx, []string{check}); err != nil || got[check] {
		t.Fatalf("a failed Change's check still in use: %v %v", got, err)
	}
}

// A Change's check runs in a pod of its own, and the pod goes after it.
func TestChangeVerifiedInAPod(t *testing.T) {
	needRoot(t)
	h := newHarness(t, onKube(t))
	runPipeline(t, h)
	owner, id := editable(t, h)
	owner.setCheck(id, "test \"$(cat README.md)\" = '# checked' && pwd")
	_, base := owner.session(id)
	owner.put(base, "README.md", []byte("# checked\n"), nil)
	cid := decode[changeJSON](t, owner.submit(base, "")).ChangeID
	ch := owner.waitChange(id, cid, models.ChangeVerified, models.ChangeFailed)
	if ch.Status != models.ChangeVerified {
		t.Fatalf("the check in a pod: %+v", ch)
	}
	waitNoPods(t, h)
}
