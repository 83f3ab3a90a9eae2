package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"atelier/sandbox"
)

// fakeAPI is the dynamic fake with what the provider relies on of a real
// API server and the fake's tracker lacks: a resourceVersion and uid set
// on every write, an update from a stale resourceVersion refused with
// Conflict (TestFakeTrackerIgnoresResourceVersion shows the tracker alone
// does not), and a delete's preconditions honoured. The fake runs every
// reactor under one lock, so each of these is atomic, as on a server.
type fakeAPI struct {
	*dynamicfake.FakeDynamicClient
	t       *testing.T
	version int
	// afterWrite, when set, runs after every write, under the fake's lock.
	afterWrite func()
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := networkingv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{FakeDynamicClient: dynamicfake.NewSimpleDynamicClient(scheme), t: t}
	f.PrependReactor("*", "*", f.react)
	return f
}

func (f *fakeAPI) react(action k8stesting.Action) (bool, runtime.Object, error) {
	tracker := f.Tracker()
	gvr, ns := action.GetResource(), action.GetNamespace()
	if action.GetSubresource() != "" {
		return false, nil, nil
	}
	// By verb: an update action also satisfies CreateAction.
	switch action.GetVerb() {
	case "create":
		a := action.(k8stesting.CreateAction)
		obj := a.GetObject().DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		if m.GetName() == "" {
			return true, nil, apierrors.NewBadRequest("no name")
		}
		f.version++
		m.SetResourceVersion(strconv.Itoa(f.version))
		m.SetUID(types.UID(fmt.Sprintf("uid-%d", f.version)))
		m.SetCreationTimestamp(metav1.Now())
		if err := tracker.Create(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		f.wrote()
		return true, obj, nil
	case "update":
		a := action.(k8stesting.UpdateAction)
		obj := a.GetObject().DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		stored, err := tracker.Get(gvr, ns, m.GetName())
		if err != nil {
			return true, nil, err
		}
		sm, _ := meta.Accessor(stored)
		if rv := m.GetResourceVersion(); rv != "" && rv != sm.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), m.GetName(), errors.New("the object has been modified"))
		}
		f.version++
		m.SetResourceVersion(strconv.Itoa(f.version))
		m.SetUID(sm.GetUID())
		m.SetCreationTimestamp(sm.GetCreationTimestamp())
		if err := tracker.Update(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		f.wrote()
		return true, obj, nil
	case "delete":
		a := action.(k8stesting.DeleteActionImpl)
		stored, err := tracker.Get(gvr, ns, a.Name)
		if err != nil {
			return true, nil, err
		}
		sm, _ := meta.Accessor(stored)
		if pre := a.DeleteOptions.Preconditions; pre != nil {
			if (pre.UID != nil && *pre.UID != sm.GetUID()) || (pre.ResourceVersion != nil && *pre.ResourceVersion != sm.GetResourceVersion()) {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), a.Name, errors.New("precondition failed"))
			}
		}
		if err := tracker.Delete(gvr, ns, a.Name); err != nil {
			return true, nil, err
		}
		f.wrote()
		return true, nil, nil
	}
	return false, nil, nil
}

func (f *fakeAPI) wrote() {
	if f.afterWrite != nil {
		f.afterWrite()
	}
}

// storedPods reads the tracker directly, as the test's view of the
// cluster (not through the code under test). Callable under the fake's
// lock.
func (f *fakeAPI) storedPods(namespace string) []corev1.Pod {
	f.t.Helper()
	list, err := f.Tracker().List(apiResources["pods"], corev1.SchemeGroupVersion.WithKind("Pod"), namespace)
	if err != nil {
		f.t.Fatalf("list pods: %v", err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		f.t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, item := range items {
		var p corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.(*unstructured.Unstructured).Object, &p); err != nil {
			f.t.Fatal(err)
		}
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// put stores a pod directly, as another party (the kubelet) would.
func (f *fakeAPI) put(p *corev1.Pod) {
	f.t.Helper()
	u, err := toObject(withKind(p))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.Tracker().Add(u); err != nil {
		f.t.Fatal(err)
	}
}

// checkVerbs fails for any request the fake saw that apiVerbs, and so
// the Role, does not grant.
func (f *fakeAPI) checkVerbs() {
	f.t.Helper()
	seen := map[string]bool{}
	for _, a := range f.Actions() {
		res := a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			res += "/" + sub
		}
		key := a.GetVerb() + " " + res
		if seen[key] {
			continue
		}
		seen[key] = true
		if !slices.Contains(apiVerbs[res], a.GetVerb()) {
			f.t.Errorf("the provider made a request the Role does not grant: %s", key)
		}
	}
	if len(seen) == 0 {
		f.t.Error("the fake saw no request at all")
	}
}

func testConfig() Config {
	return Config{Namespace: "sandboxes", Image: "registry.example/sandbox:1", PoliciesEnforced: true}.Defaults()
}

func newTestCluster(t *testing.T, cfg Config) (*cluster, *fakeAPI) {
	f := newFakeAPI(t)
	t.Cleanup(f.checkVerbs)
	return newCluster(f, cfg), f
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// TestFakeTrackerIgnoresResourceVersion pins why fakeAPI exists: the
// dynamic fake's tracker takes an update made from a stale read. Should
// client-go start refusing it, this fails, and fakeAPI's update check can
// go.
func TestFakeTrackerIgnoresResourceVersion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := dynamicfake.NewSimpleDynamicClient(scheme)
	pods := client.Resource(apiResources["pods"]).Namespace("sandboxes")
	ctx := t.Context()
	p := podFor(testConfig(), sandbox.Session{ID: "a"})
	p.ResourceVersion = "1"
	u, _ := toObject(p)
	if _, err := pods.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := u.DeepCopy()
	stale.SetResourceVersion("7")
	if _, err := pods.Update(ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the bare fake refused a stale update (%v): it enforces resourceVersion now", err)
	}

	// And fakeAPI does refuse it.
	f := newFakeAPI(t)
	fpods := f.Resource(apiResources["pods"]).Namespace("sandboxes")
	created, err := fpods.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fpods.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update at the read version: %v", err)
	}
	if _, err := fpods.Update(ctx, created, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("second update from the same read: %v, want Conflict", err)
	}
}

func TestClusterCreateTwice(t *testing.T) {
	cfg := testConfig()
	c, f := newTestCluster(t, cfg)
	s := sandbox.Session{ID: "sess-1", ProjectID: 3}
	var wg sync.WaitGroup
	uids := make([]types.UID, 4)
	for i := range uids {
		wg.Go(func() {
			p, err := c.createSessionPod(t.Context(), s)
			if err != nil {
				t.Error(err)
				return
			}
			uids[i] = p.UID
		})
	}
	wg.Wait()
	for _, u := range uids {
		if u == "" || u != uids[0] {
			t.Fatalf("creates returned different pods: %v", uids)
		}
	}
	if pods := f.storedPods(cfg.Namespace); len(pods) != 1 || pods[0].Name != sessionPodName(s.ID) {
		t.Fatalf("pods after four creates: %v", names(pods))
	}
	p, err := c.sessionPod(t.Context(), s.ID)
	if err != nil || p.UID != uids[0] {
		t.Fatalf("sessionPod: %v, %v", p, err)
	}
	if _, err := c.sessionPod(t.Context(), "other"); !errors.Is(err, ErrNoSessionPod) {
		t.Fatalf("sessionPod of a session without one: %v", err)
	}
}

func TestClusterDeleteMissing(t *testing.T) {
	cfg := testConfig()
	c, f := newTestCluster(t, cfg)
	if err := c.deletePod(t.Context(), "atelier-s-none", "", ""); err != nil {
		t.Fatalf("delete of a missing pod: %v", err)
	}
	p, err := c.createSessionPod(t.Context(), sandbox.Session{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// A uid that is not the pod's: another pod of that name now, left.
	if err := c.deletePod(t.Context(), p.Name, "uid-other", ""); err != nil {
		t.Fatal(err)
	}
	if n := len(f.storedPods(cfg.Namespace)); n != 1 {
		t.Fatalf("a delete for another uid removed the pod (%d left)", n)
	}
	if err := c.deletePod(t.Context(), p.Name, p.UID, ""); err != nil {
		t.Fatal(err)
	}
	if n := len(f.storedPods(cfg.Namespace)); n != 0 {
		t.Fatalf("%d pods left after delete", n)
	}
	var sawGrace bool
	for _, a := range f.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			g := d.DeleteOptions.GracePeriodSeconds
			sawGrace = g != nil && *g == podGraceSeconds
			if !sawGrace {
				t.Fatalf("delete without the grace period: %+v", d.DeleteOptions)
			}
		}
	}
	if !sawGrace {
		t.Fatal("no delete seen")
	}
}

func TestClusterPolicies(t *testing.T) {
	cfg := testConfig()
	c, f := newTestCluster(t, cfg)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := c.applyPolicies(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	stored := func() map[string]*networkingv1.NetworkPolicy {
		out := map[string]*networkingv1.NetworkPolicy{}
		for _, want := range networkPolicies(cfg) {
			u, err := f.Resource(apiResources["networkpolicies"]).Namespace(cfg.Namespace).Get(t.Context(), want.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			have, err := fromObject[networkingv1.NetworkPolicy](u)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(have.Spec, want.Spec) {
				t.Fatalf("policy %s: %+v, want %+v", want.Name, have.Spec, want.Spec)
			}
			out[want.Name] = have
		}
		return out
	}
	before := stored()

	// Applied again with nothing changed: no write.
	writes := func() int {
		n := 0
		for _, a := range f.Actions() {
			if v := a.GetVerb(); v == "create" || v == "update" {
				n++
			}
		}
		return n
	}
	w := writes()
	if err := c.applyPolicies(t.Context()); err != nil {
		t.Fatal(err)
	}
	if writes() != w {
		t.Fatal("applying unchanged policies wrote them")
	}

	// Someone loosened the deny policy: the next apply puts it back.
	loose := before[policyDeny].DeepCopy()
	loose.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	loose.APIVersion, loose.Kind = "networking.k8s.io/v1", "NetworkPolicy"
	u, _ := toObject(loose)
	if _, err := f.Resource(apiResources["networkpolicies"]).Namespace(cfg.Namespace).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.applyPolicies(t.Context()); err != nil {
		t.Fatal(err)
	}
	stored()
}

func TestClusterWaitRunning(t *testing.T) {
	cfg := testConfig()
	c, f := newTestCluster(t, cfg)
	p, err := c.createSessionPod(t.Context(), sandbox.Session{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	setPhase := func(phase corev1.PodPhase, waiting string) {
		q, err := c.getPod(t.Context(), p.Name)
		if err != nil {
			t.Error(err)
			return
		}
		q.Status.Phase = phase
		if waiting != "" {
			q.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: commandsContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		}
		u, _ := toObject(withKind(q))
		if err := f.Tracker().Update(apiResources["pods"], u, cfg.Namespace); err != nil {
			t.Error(err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.waitRunning(ctx, p.Name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait for a pod that never runs: %v", err)
	}

	go func() {
		time.Sleep(150 * time.Millisecond)
		setPhase(corev1.PodRunning, "")
	}()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := c.waitRunning(ctx, p.Name)
	if err != nil || got.Status.Phase != corev1.PodRunning {
		t.Fatalf("wait for a pod that starts: %v, %v", got, err)
	}

	setPhase(corev1.PodPending, "ImagePullBackOff")
	if _, err := c.waitRunning(ctx, p.Name); !errors.Is(err, ErrPodEnded) {
		t.Fatalf("wait for a pod whose image cannot be pulled: %v", err)
	}
	setPhase(corev1.PodFailed, "")
	if _, err := c.waitRunning(ctx, p.Name); !errors.Is(err, ErrPodEnded) {
		t.Fatalf("wait for a failed pod: %v", err)
	}
	if _, err := c.waitRunning(ctx, "atelier-s-gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("wait for a missing pod: %v", err)
	}
}

func TestReap(t *testing.T) {
	cfg := testConfig()
	c, f := newTestCluster(t, cfg)
	sessionPod := func(id string, phase corev1.PodPhase) *corev1.Pod {
		p := podFor(cfg, sandbox.Session{ID: id, ProjectID: 1})
		p.UID = types.UID("uid-" + id)
		p.Status.Phase = phase
		return p
	}
	open := sessionPod("open-1", corev1.PodRunning)
	openClaimed := warmPodFor(cfg, 0, 0) // a warm pod a session claimed
	openClaimed.UID = "uid-claimed"
	delete(openClaimed.Labels, labelPool)
	openClaimed.Labels[labelSession] = sessionKey("open_2")
	openClaimed.Annotations = map[string]string{annotationID: "open_2"}
	closed := sessionPod("closed-1", corev1.PodRunning)
	failedOpen := sessionPod("open-3", corev1.PodFailed)
	warm := warmPodFor(cfg, 1, 0)
	warm.UID = "uid-warm"
	failedWarm := warmPodFor(cfg, 2, 0)
	failedWarm.UID = "uid-failed-warm"
	failedWarm.Status.Phase = corev1.PodFailed
	orphan := sessionPod("orphan", corev1.PodRunning) // its id lost
	orphan.Annotations = nil
	elsewhere := sessionPod("closed-2", corev1.PodRunning) // not ours
	elsewhere.Namespace = "other"
	for _, p := range []*corev1.Pod{open, openClaimed, closed, failedOpen, warm, failedWarm, orphan, elsewhere} {
		f.put(p)
	}

	var mu sync.Mutex
	var asked [][]string
	isOpen := func(_ context.Context, ids []string) (map[string]bool, error) {
		mu.Lock()
		asked = append(asked, ids)
		mu.Unlock()
		out := map[string]bool{}
		for _, id := range ids {
			out[id] = id == "open-1" || id == "open_2" || id == "open-3"
		}
		return out, nil
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := c.reap(t.Context(), isOpen); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	want := []string{openClaimed.Name, warm.Name, open.Name}
	sort.Strings(want)
	if got := names(f.storedPods(cfg.Namespace)); !slices.Equal(got, want) {
		t.Fatalf("after reap: %v, want %v", got, want)
	}
	if got := names(f.storedPods("other")); len(got) != 1 {
		t.Fatalf("reap touched another namespace: %v", got)
	}
	for _, ids := range asked {
		if slices.Contains(ids, "open-3") || slices.Contains(ids, "") {
			t.Errorf("asked about a failed pod's or no session: %v", ids)
		}
	}

	if err := c.reap(t.Context(), func(context.Context, []string) (map[string]bool, error) {
		return nil, errors.New("database down")
	}); err == nil {
		t.Fatal("reap went on without knowing which sessions are open")
	}
	if n := len(f.storedPods(cfg.Namespace)); n != 3 {
		t.Fatalf("a failed look-up deleted pods: %d left", n)
	}
}

// liveWarm counts the warm pods a session could still claim.
func liveWarm(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Labels[labelPool] == poolWarm && claimable(&p) {
			n++
		}
	}
	return n
}

func TestWarmClaimConcurrent(t *testing.T) {
	cfg := testConfig()
	cfg.WarmPods = 5
	c, f := newTestCluster(t, cfg)
	if err := c.topUpWarm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := liveWarm(f.storedPods(cfg.Namespace)); n != 5 {
		t.Fatalf("%d warm pods, want 5", n)
	}

	const claimers = 8
	got := make([]*corev1.Pod, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			s := sandbox.Session{ID: fmt.Sprintf("claimer-%d", i), ProjectID: int64(i), Network: sandbox.Allow}
			p, err := c.claimWarm(t.Context(), s)
			if errors.Is(err, ErrNoWarmPod) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = p
		})
	}
	wg.Wait()
	owner := map[string]int{}
	for i, p := range got {
		if p == nil {
			continue
		}
		if prev, ok := owner[p.Name]; ok {
			t.Fatalf("pod %s given to claimers %d and %d", p.Name, prev, i)
		}
		owner[p.Name] = i
	}
	if len(owner) != 5 {
		t.Fatalf("%d claims succeeded, want 5 (one per warm pod)", len(owner))
	}
	for _, p := range f.storedPods(cfg.Namespace) {
		i, ok := owner[p.Name]
		if !ok {
			t.Fatalf("pod %s left unclaimed", p.Name)
		}
		id := fmt.Sprintf("claimer-%d", i)
		if p.Labels[labelSession] != sessionKey(id) || p.Annotations[annotationID] != id ||
			p.Labels[labelPool] != "" || p.Labels[labelNetwork] != networkAllow || p.Labels[labelProject] != strconv.Itoa(i) {
			t.Fatalf("pod %s claimed by %s is labelled %v %v", p.Name, id, p.Labels, p.Annotations)
		}
		if found, err := c.sessionPod(t.Context(), id); err != nil || found.Name != p.Name {
			t.Fatalf("sessionPod(%s): %v, %v", id, found, err)
		}
	}
}

func TestWarmTopUpConcurrent(t *testing.T) {
	cfg := testConfig()
	cfg.WarmPods = 4
	c, f := newTestCluster(t, cfg)
	most := 0
	f.afterWrite = func() { most = max(most, liveWarm(f.storedPods(cfg.Namespace))) }

	// Instances topping up while sessions claim: the pool refills, and
	// is never above its size. (Not with the reaper deleting claimed pods
	// meanwhile: topUpWarm's comment says what that rare race can leave.)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 10 {
				if err := c.topUpWarm(t.Context()); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for i := range 5 {
				_, err := c.claimWarm(t.Context(), sandbox.Session{ID: fmt.Sprintf("s-%d-%d", g, i)})
				if err != nil && !errors.Is(err, ErrNoWarmPod) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := c.topUpWarm(t.Context()); err != nil {
		t.Fatal(err)
	}
	pods := f.storedPods(cfg.Namespace)
	if most > cfg.WarmPods {
		t.Fatalf("the pool reached %d warm pods, above its %d", most, cfg.WarmPods)
	}
	if n := liveWarm(pods); n != cfg.WarmPods {
		t.Fatalf("%d warm pods after topping up, want %d: %v", n, cfg.WarmPods, names(pods))
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Labels[labelPool] != poolWarm {
			continue
		}
		slot, _, ok := parseWarmPodName(p.Name)
		if !ok || slot >= cfg.WarmPods || seen[strconv.Itoa(slot)] {
			t.Fatalf("warm pods %v do not fill slots 0..%d once each", names(pods), cfg.WarmPods-1)
		}
		seen[strconv.Itoa(slot)] = true
	}

	// A smaller pool: the surplus goes, claimed pods stay.
	claimed := len(pods) - cfg.WarmPods
	cfg.WarmPods = 2
	if err := newCluster(f, cfg).topUpWarm(t.Context()); err != nil {
		t.Fatal(err)
	}
	pods = f.storedPods(cfg.Namespace)
	if n := liveWarm(pods); n != 2 || len(pods) != claimed+2 {
		t.Fatalf("after shrinking the pool to 2: %d warm of %v (%d claimed before)", n, names(pods), claimed)
	}
}
