package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"atelier/sandbox"
	"atelier/sandbox/kube/inpod"
)

// The labels and annotation every sandbox pod carries. Label values allow
// at most 63 characters of [A-Za-z0-9_.-], first and last alphanumeric,
// while a session's id has up to 80 of [A-Za-z0-9_-] and may start or
// end with - or _: so the session label holds sessionKey(id), which
// always fits, and the id itself rides in an annotation, where the reaper
// reads it back. One encoding for every id, never "the id when it
// happens to fit", keeps a selector for a session a single lookup.
const (
	labelManagedBy   = "app.kubernetes.io/managed-by"
	managedByAtelier = "atelier"
	labelSession     = "atelier.dev/session"
	labelProject     = "atelier.dev/project"
	labelNetwork     = "atelier.dev/network"
	labelPool        = "atelier.dev/pool"
	poolWarm         = "warm"
	annotationID     = "atelier.dev/session-id"

	networkDeny  = "deny"
	networkAllow = "allow"
)

// Where the pod's writable places are: the root file system is read-only.
const (
	homeDir     = "/home/atelier"
	tmpDir      = "/tmp"
	podHostname = "sandbox"
)

// A session's pod has two containers on the same volumes and network: one
// for its commands (and the copies in and looks at the workspace), one
// for its shells. Each is a PID namespace of its own, so a command can
// signal no shell (`kill -9 -1` ends its own container's processes), as
// in the jail, where every command has a PID namespace of its own.
const (
	commandsContainer = "sandbox"
	shellsContainer   = "shells"
)

// MainProcess is the main process of a pod's container: the helper's
// idle, which in the commands' container also runs the commands, out of
// their reach (inpod's supervisor).
func MainProcess(cfg Config, container string) []string {
	if container == commandsContainer {
		return []string{cfg.Helper, inpod.Arg, "idle", "-supervise"}
	}
	return []string{cfg.Helper, inpod.Arg, "idle"}
}

// podGraceSeconds is short: the commands' main process ends at no signal
// its commands may send, SIGTERM included, so a deleted pod's runtime
// kills it after the grace; and a session's commands are over once its
// pod is deleted.
const podGraceSeconds int64 = 2

// Names of the two NetworkPolicies in the sandbox namespace.
const (
	policyDeny  = "atelier-sandbox-deny"
	policyAllow = "atelier-sandbox-allow"
)

// sessionKey is the session's id as a label value and a DNS label: the
// first 160 bits of its SHA-256 in hex (40 characters). Ids differ in
// case and may hold "_", which neither allows, so no escaping of the id
// would do; at 160 bits two sessions' keys do not collide.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:20])
}

// sessionPodName names the pod created for a session (not one claimed
// from the warm pool, which keeps its own name): the same on every
// instance, so two that create it at once get one pod.
func sessionPodName(id string) string {
	return "atelier-s-" + sessionKey(id)
}

// networkLabel is the value of labelNetwork for a session: anything
// but Allow is denied, as sandbox.Network's empty value is Deny.
func networkLabel(n sandbox.Network) string {
	if n == sandbox.Allow {
		return networkAllow
	}
	return networkDeny
}

// sessionLabels are the labels of a session's pod.
func sessionLabels(s sandbox.Session) map[string]string {
	return map[string]string{
		labelManagedBy: managedByAtelier,
		labelSession:   sessionKey(s.ID),
		labelProject:   strconv.FormatInt(s.ProjectID, 10),
		labelNetwork:   networkLabel(s.Network),
	}
}

// podFor is the pod that runs session s's commands and shells: two
// containers whose main processes wait while commands arrive through
// pods/exec, with nothing of the cluster in reach (no token, no service
// links, no host namespaces) and nothing but its emptyDirs writable.
// Kubernetes bounds each container on its own: each has the settings'
// limits, and the shells' asks the scheduler for a quarter of them, as
// shells mostly wait.
func podFor(cfg Config, s sandbox.Session) *corev1.Pod {
	yes, no := true, false
	uid := cfg.UID
	grace := podGraceSeconds
	// The kubelet counts disk-backed emptyDirs against the pod's
	// ephemeral-storage, besides the writable layer and logs that
	// cfg.Ephemeral is for: a limit of cfg.Ephemeral alone would evict
	// the pod long before /workspace reached its own sizeLimit.
	ephemeral := cfg.Ephemeral.DeepCopy()
	ephemeral.Add(cfg.WorkspaceMax)
	ephemeral.Add(cfg.HomeMax)
	amounts := corev1.ResourceList{
		corev1.ResourceCPU:              cfg.CPU.DeepCopy(),
		corev1.ResourceMemory:           cfg.Memory.DeepCopy(),
		corev1.ResourceEphemeralStorage: ephemeral,
	}
	container := func(name string, requests corev1.ResourceList) corev1.Container {
		return corev1.Container{
			Name:       name,
			Image:      cfg.Image,
			Command:    MainProcess(cfg, name),
			WorkingDir: cfg.Workspace,
			// PATH stays the image's: its toolchains put themselves on it.
			Env: []corev1.EnvVar{{Name: "HOME", Value: homeDir}},
			Resources: corev1.ResourceRequirements{
				Requests: requests,
				Limits:   amounts.DeepCopy(),
			},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &no,
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				ReadOnlyRootFilesystem:   &yes,
				RunAsNonRoot:             &yes,
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "workspace", MountPath: cfg.Workspace},
				{Name: "home", MountPath: homeDir},
				{Name: "tmp", MountPath: tmpDir},
			},
		}
	}
	emptyDir := func(name string, medium corev1.StorageMedium, size resource.Quantity) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: &size},
		}}
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        sessionPodName(s.ID),
			Namespace:   cfg.Namespace,
			Labels:      sessionLabels(s),
			Annotations: map[string]string{annotationID: s.ID},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      podHostname,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &uid,
				RunAsGroup:     &uid,
				FSGroup:        &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{
				container(commandsContainer, amounts),
				container(shellsContainer, quarter(amounts)),
			},
			Volumes: []corev1.Volume{
				emptyDir("workspace", corev1.StorageMediumDefault, cfg.WorkspaceMax),
				emptyDir("home", corev1.StorageMediumDefault, cfg.HomeMax),
				// In memory, as the local jail's /tmp: it counts against
				// the container's memory limit.
				emptyDir("tmp", corev1.StorageMediumMemory, cfg.TmpMax),
			},
		},
	}
	if cfg.RuntimeClass != "" {
		rc := cfg.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	return pod
}

// warmPodName names the warm pod of pool slot slot, generation gen
// (cluster.topUpWarm says why names are chosen so).
func warmPodName(slot, gen int) string {
	return fmt.Sprintf("atelier-warm-%d-%d", slot, gen)
}

// parseWarmPodName reads back warmPodName's slot and generation; ok is
// false for any other name.
func parseWarmPodName(name string) (slot, gen int, ok bool) {
	rest, ok := strings.CutPrefix(name, "atelier-warm-")
	if !ok {
		return 0, 0, false
	}
	s, g, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	slot, err1 := strconv.Atoi(s)
	gen, err2 := strconv.Atoi(g)
	// The round trip refuses "+1", "01" and the like, which another
	// instance would not have chosen.
	if err1 != nil || err2 != nil || slot < 0 || gen < 0 || warmPodName(slot, gen) != name {
		return 0, 0, false
	}
	return slot, gen, true
}

// warmPodFor is a pod of the warm pool: podFor's pod with no session, its
// network denied until a session claims it (cluster.claimWarm), so a pod
// nobody owns reaches nothing.
func warmPodFor(cfg Config, slot, gen int) *corev1.Pod {
	pod := podFor(cfg, sandbox.Session{})
	pod.Name = warmPodName(slot, gen)
	pod.Annotations = nil
	pod.Labels = map[string]string{
		labelManagedBy: managedByAtelier,
		labelNetwork:   networkDeny,
		labelPool:      poolWarm,
	}
	return pod
}

// Ranges a session allowed the internet still may not reach: private,
// shared (carrier-grade NAT), link-local (the clouds' metadata service at
// 169.254.169.254), loopback and "this network", and their IPv6 peers.
var (
	blockedV4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8", "0.0.0.0/8"}
	blockedV6 = []string{"fc00::/7", "fe80::/10", "::1/128"}
)

// networkPolicies are the sandbox namespace's two NetworkPolicies.
// Everything not labelled allow is denied both ways (a pod that somehow
// lacks the label too: the selector fails closed); allow pods may reach
// the internet but none of the blocked ranges or the cluster's own, and
// the cluster's DNS; nothing may connect to any sandbox pod.
func networkPolicies(cfg Config) []*networkingv1.NetworkPolicy {
	except4 := append([]string(nil), blockedV4...)
	except6 := append([]string(nil), blockedV6...)
	for _, p := range cfg.ClusterNetworks {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p)).Masked()
		if p.Addr().Is4() {
			except4 = append(except4, p.String())
		} else {
			except6 = append(except6, p.String())
		}
	}
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: map[string]string{labelManagedBy: managedByAtelier}}
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	deny := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta(policyDeny),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: labelNetwork, Operator: metav1.LabelSelectorOpNotIn, Values: []string{networkAllow},
			}}},
			PolicyTypes: both,
		},
	}
	allow := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta(policyAllow),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelNetwork: networkAllow}},
			PolicyTypes: both,
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: except4}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: except6}},
				}},
				// The cluster's DNS sits in the cluster's (blocked)
				// pod range: named here, and only on port 53.
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{
						{Protocol: &udp, Port: &dns},
						{Protocol: &tcp, Port: &dns},
					},
				},
			},
		},
	}
	return []*networkingv1.NetworkPolicy{deny, allow}
}

// unmapBits is what a v4-mapped IPv6 prefix loses in bits once unmapped
// (::ffff:10.0.0.0/104 is 10.0.0.0/8).
func unmapBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}

// quarter is a quarter of each amount.
func quarter(amounts corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range amounts {
		out[name] = *resource.NewMilliQuantity(q.MilliValue()/4, q.Format)
	}
	return out
}
