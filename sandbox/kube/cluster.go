package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"atelier/sandbox"
)

// apiVerbs is every request the provider makes of the API server, by
// resource and verb, and so exactly what the instances' Role in the
// sandbox namespace grants (deploy/kubernetes/rbac.yaml; a test holds
// the two equal). cluster's methods reach the API only through
// cluster.resource, which refuses what is not here.
//
// pods/exec has both verbs: exec over WebSocket is a GET, over SPDY a
// POST (create).
var apiVerbs = map[string][]string{
	"pods":            {"create", "delete", "get", "list", "update"},
	"pods/exec":       {"create", "get"},
	"networkpolicies": {"create", "get", "update"},
}

// apiResources places each resource of apiVerbs in its API group and
// version.
var apiResources = map[string]schema.GroupVersionResource{
	"pods":            corev1.SchemeGroupVersion.WithResource("pods"),
	"pods/exec":       corev1.SchemeGroupVersion.WithResource("pods"),
	"networkpolicies": networkingv1.SchemeGroupVersion.WithResource("networkpolicies"),
}

// Errors of the cluster's pods.
var (
	// ErrPodEnded: the pod stopped (failed, or its main process ended),
	// or cannot start (its image cannot be pulled): the session needs
	// another.
	ErrPodEnded = errors.New("kube: the sandbox pod has stopped")
	// ErrNoWarmPod: the warm pool had no pod to give.
	ErrNoWarmPod = errors.New("kube: no warm pod left to claim")
	// ErrNoSessionPod: the session has no pod.
	ErrNoSessionPod = errors.New("kube: the session has no pod")
)

// cluster is what the provider does with the API server, in the sandbox
// namespace, through the dynamic client: it needs no typed clientset,
// whose registration of every API group would lengthen the server's
// start for nothing.
type cluster struct {
	api dynamic.Interface
	cfg Config
}

func newCluster(api dynamic.Interface, cfg Config) *cluster {
	return &cluster{api: api, cfg: cfg}
}

// resource is the client for a verb on a resource of apiVerbs in the
// sandbox namespace, or an error for one the Role would not grant.
func (c *cluster) resource(name, verb string) (dynamic.ResourceInterface, error) {
	if !slices.Contains(apiVerbs[name], verb) {
		return nil, fmt.Errorf("kube: %s on %s is not in apiVerbs, so the Role does not grant it", verb, name)
	}
	return c.api.Resource(apiResources[name]).Namespace(c.cfg.Namespace), nil
}

// toObject and fromObject convert between k8s.io/api's typed structs and
// what the dynamic client carries.
func toObject(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("kube: encode %T: %w", obj, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromObject[T any](u *unstructured.Unstructured) (*T, error) {
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, fmt.Errorf("kube: decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return &v, nil
}

// withKind sets the apiVersion and kind the dynamic client needs, which
// a pod read back from it may lack once converted.
func withKind(p *corev1.Pod) *corev1.Pod {
	p.APIVersion, p.Kind = "v1", "Pod"
	return p
}

// createPod creates pod, or returns the one of its name already there:
// two instances that create a session's pod at once get one pod.
func (c *cluster) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods, err := c.resource("pods", "create")
	if err != nil {
		return nil, err
	}
	u, err := toObject(withKind(pod))
	if err != nil {
		return nil, err
	}
	got, err := pods.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return c.getPod(ctx, pod.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("kube: create pod %s: %w", pod.Name, err)
	}
	return fromObject[corev1.Pod](got)
}

// createSessionPod creates session s's own pod (when the warm pool had
// none for it).
func (c *cluster) createSessionPod(ctx context.Context, s sandbox.Session) (*corev1.Pod, error) {
	return c.createPod(ctx, podFor(c.cfg, s))
}

// getPod reads a pod; apierrors.IsNotFound tells a missing one.
func (c *cluster) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	pods, err := c.resource("pods", "get")
	if err != nil {
		return nil, err
	}
	u, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("kube: get pod %s: %w", name, err)
	}
	return fromObject[corev1.Pod](u)
}

// listPods lists the namespace's pods that have every label of set.
func (c *cluster) listPods(ctx context.Context, set labels.Set) ([]corev1.Pod, error) {
	pods, err := c.resource("pods", "list")
	if err != nil {
		return nil, err
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(set).String()})
	if err != nil {
		return nil, fmt.Errorf("kube: list pods %s: %w", set, err)
	}
	out := make([]corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		p, err := fromObject[corev1.Pod](&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *p)
	}
	return out, nil
}

// sessionPod is the pod session id runs in, created for it or claimed
// from the warm pool (whose name is not the session's): found by label.
// A pod on its way out does not count.
func (c *cluster) sessionPod(ctx context.Context, id string) (*corev1.Pod, error) {
	pods, err := c.listPods(ctx, labels.Set{labelManagedBy: managedByAtelier, labelSession: sessionKey(id)})
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if p := &pods[i]; p.DeletionTimestamp == nil && !podEnded(p) && p.Annotations[annotationID] == id {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrNoSessionPod, id)
}

// deletePod deletes a pod; one already gone is fine. A uid, when given,
// makes the deletion apply only to that pod and not to another of the
// same name made since it was read; a resourceVersion only to the pod as
// it was read (a warm pod nobody claimed since). A precondition that no
// longer holds is no error: the pod is somebody else's now.
func (c *cluster) deletePod(ctx context.Context, name string, uid types.UID, resourceVersion string) error {
	pods, err := c.resource("pods", "delete")
	if err != nil {
		return err
	}
	grace := podGraceSeconds
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" || resourceVersion != "" {
		opts.Preconditions = &metav1.Preconditions{}
		if uid != "" {
			opts.Preconditions.UID = &uid
		}
		if resourceVersion != "" {
			opts.Preconditions.ResourceVersion = &resourceVersion
		}
	}
	err = pods.Delete(ctx, name, opts)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kube: delete pod %s: %w", name, err)
	}
	return nil
}

// podEnded: the pod will never run a command again.
func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

// Reasons a container waits for ever: the pod will not start without
// the operator.
var stuckReasons = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}

// waitRunning waits until the pod runs, polling with a growing interval
// (a pod starts in about a second when its image is on the node, in
// minutes when it is pulled), for as long as ctx lets it. It fails with
// ErrPodEnded once the pod cannot run.
func (c *cluster) waitRunning(ctx context.Context, name string) (*corev1.Pod, error) {
	interval := 100 * time.Millisecond
	const maxInterval = 2 * time.Second
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kube: wait for pod %s: %w", name, context.Cause(ctx))
		case <-timer.C:
		}
		p, err := c.getPod(ctx, name)
		if err != nil {
			return nil, err
		}
		switch {
		case p.DeletionTimestamp != nil:
			return nil, fmt.Errorf("%w: pod %s is being deleted", ErrPodEnded, name)
		case podEnded(p):
			return nil, fmt.Errorf("%w: pod %s is %s: %s", ErrPodEnded, name, p.Status.Phase, p.Status.Message)
		case p.Status.Phase == corev1.PodRunning:
			return p, nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && slices.Contains(stuckReasons, w.Reason) {
				return nil, fmt.Errorf("%w: pod %s cannot start: %s: %s", ErrPodEnded, name, w.Reason, w.Message)
			}
		}
		timer.Reset(interval)
		interval = min(2*interval, maxInterval)
	}
}

// applyPolicies makes the namespace's NetworkPolicies networkPolicies'
// own: created when missing, updated when they differ, left alone
// otherwise. Instances starting together race safely: a create that
// finds one made meanwhile reads it again, and an update from a stale
// read fails with Conflict and reads again.
func (c *cluster) applyPolicies(ctx context.Context) error {
	for _, want := range networkPolicies(c.cfg) {
		if err := c.applyPolicy(ctx, want); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) applyPolicy(ctx context.Context, want *networkingv1.NetworkPolicy) error {
	const attempts = 5
	var last error
	for range attempts {
		get, err := c.resource("networkpolicies", "get")
		if err != nil {
			return err
		}
		u, err := get.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			create, err := c.resource("networkpolicies", "create")
			if err != nil {
				return err
			}
			obj, err := toObject(want)
			if err != nil {
				return err
			}
			_, err = create.Create(ctx, obj, metav1.CreateOptions{})
			if err == nil {
				return nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("kube: create networkpolicy %s: %w", want.Name, err)
			}
			last = err
			continue
		case err != nil:
			return fmt.Errorf("kube: get networkpolicy %s: %w", want.Name, err)
		}
		have, err := fromObject[networkingv1.NetworkPolicy](u)
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(have.Spec, want.Spec) && have.Labels[labelManagedBy] == managedByAtelier {
			return nil
		}
		have.Spec = want.Spec
		if have.Labels == nil {
			have.Labels = map[string]string{}
		}
		have.Labels[labelManagedBy] = managedByAtelier
		have.APIVersion, have.Kind = want.APIVersion, want.Kind
		update, err := c.resource("networkpolicies", "update")
		if err != nil {
			return err
		}
		obj, err := toObject(have)
		if err != nil {
			return err
		}
		_, err = update.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("kube: update networkpolicy %s: %w", want.Name, err)
		}
		last = err
	}
	return fmt.Errorf("kube: networkpolicy %s still changing after %d attempts: %w", want.Name, attempts, last)
}

// warmSelector selects the warm pool's pods.
var warmSelector = labels.Set{labelManagedBy: managedByAtelier, labelPool: poolWarm}

// claimable: a warm pod a session may take (one starting will do; the
// session waits for it).
func claimable(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && !podEnded(p) && p.Labels[labelSession] == ""
}

// claimWarm gives session s a pod of the warm pool: relabelled as the
// session's with an update that carries the resourceVersion the pod was
// read at, so of two instances that claim one pod at once the second
// gets a Conflict and tries the next. Running pods go first; claimers
// start at different places of the list (by session) so that they
// rarely meet. ErrNoWarmPod when none is left.
func (c *cluster) claimWarm(ctx context.Context, s sandbox.Session) (*corev1.Pod, error) {
	pods, err := c.listPods(ctx, warmSelector)
	if err != nil {
		return nil, err
	}
	pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return !claimable(&p) })
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	if n := len(pods); n > 0 {
		k := sessionKey(s.ID)
		start := int(k[0]) % n // spreads claimers; fairness does not matter
		pods = slices.Concat(pods[start:], pods[:start])
	}
	sort.SliceStable(pods, func(i, j int) bool {
		return pods[i].Status.Phase == corev1.PodRunning && pods[j].Status.Phase != corev1.PodRunning
	})
	update, err := c.resource("pods", "update")
	if err != nil {
		return nil, err
	}
	for i := range pods {
		p := withKind(&pods[i])
		delete(p.Labels, labelPool)
		for k, v := range sessionLabels(s) {
			p.Labels[k] = v
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[annotationID] = s.ID
		obj, err := toObject(p)
		if err != nil {
			return nil, err
		}
		got, err := update.Update(ctx, obj, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue // another instance took it, or it is gone
		}
		if err != nil {
			return nil, fmt.Errorf("kube: claim warm pod %s: %w", p.Name, err)
		}
		return fromObject[corev1.Pod](got)
	}
	return nil, ErrNoWarmPod
}

// topUpWarm brings the warm pool to cfg.WarmPods pods, and no further
// however many instances top it up at once.
//
// The pool has cfg.WarmPods slots; slot i's pod is named
// atelier-warm-<i>-<g>, where g is one more than the highest generation
// any pod of slot i still has, claimed ones included (they keep their
// names). Instances that saw the same pods choose the same names, so of
// their creates one succeeds and the others get AlreadyExists; an
// instance that saw older pods chooses a generation that exists already.
// The one gap: a pod claimed and then deleted altogether between another
// instance's list and its create frees its name for that stale create;
// the surplus this rare race leaves (and any left by a smaller WarmPods)
// is deleted by the next top-up, the same surplus by every instance.
func (c *cluster) topUpWarm(ctx context.Context) error {
	pods, err := c.listPods(ctx, labels.Set{labelManagedBy: managedByAtelier})
	if err != nil {
		return err
	}
	nextGen := map[int]int{}
	warm := map[int][]corev1.Pod{}
	for _, p := range pods {
		slot, gen, ok := parseWarmPodName(p.Name)
		if !ok {
			continue
		}
		nextGen[slot] = max(nextGen[slot], gen+1)
		if p.Labels[labelPool] == poolWarm && claimable(&p) {
			warm[slot] = append(warm[slot], p)
		}
	}
	for slot := range c.cfg.WarmPods {
		if len(warm[slot]) > 0 {
			continue
		}
		if _, err := c.createPod(ctx, warmPodFor(c.cfg, slot, nextGen[slot])); err != nil {
			return err
		}
	}
	for slot, ps := range warm {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
		if slot < c.cfg.WarmPods {
			ps = ps[1:]
		}
		for _, p := range ps {
			// Only the pod as it was read: one claimed since is a
			// session's now.
			if err := c.deletePod(ctx, p.Name, p.UID, p.ResourceVersion); err != nil {
				return err
			}
		}
	}
	return nil
}

// reap deletes the pods no session needs: those whose session open says
// is not open, those that stopped, and those of nobody (neither warm nor
// a session's). Any instance may run it, any number at once: a pod
// already gone is no error, and a deletion applies only to the pod that
// was read (by uid).
func (c *cluster) reap(ctx context.Context, open func(ctx context.Context, sessionIDs []string) (map[string]bool, error)) error {
	pods, err := c.listPods(ctx, labels.Set{labelManagedBy: managedByAtelier})
	if err != nil {
		return err
	}
	var doomed []corev1.Pod
	bySession := map[string][]corev1.Pod{}
	for _, p := range pods {
		id := p.Annotations[annotationID]
		switch {
		case p.DeletionTimestamp != nil:
		case podEnded(&p):
			doomed = append(doomed, p)
		case p.Labels[labelPool] == poolWarm && p.Labels[labelSession] == "":
		case id != "" && p.Labels[labelSession] == sessionKey(id):
			bySession[id] = append(bySession[id], p)
		default:
			doomed = append(doomed, p)
		}
	}
	if len(bySession) > 0 {
		ids := make([]string, 0, len(bySession))
		for id := range bySession {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		isOpen, err := open(ctx, ids)
		if err != nil {
			return fmt.Errorf("kube: reap: which sessions are open: %w", err)
		}
		for _, id := range ids {
			if !isOpen[id] {
				doomed = append(doomed, bySession[id]...)
			}
		}
	}
	var errs []error
	for _, p := range doomed {
		if err := c.deletePod(ctx, p.Name, p.UID, ""); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
