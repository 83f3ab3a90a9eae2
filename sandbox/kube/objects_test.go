package kube

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"atelier/sandbox"
)

func TestPodShape(t *testing.T) {
	cfg := testConfig()
	s := sandbox.Session{ID: "-Edit_" + strings.Repeat("x", 74), ProjectID: 42, Network: sandbox.Allow}
	p := podFor(cfg, s)
	spec := p.Spec

	if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
		t.Errorf("pod name %q: %v", p.Name, errs)
	}
	for k, v := range p.Labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
	wantLabels := map[string]string{
		labelManagedBy: "atelier", labelSession: sessionKey(s.ID), labelProject: "42", labelNetwork: "allow",
	}
	if !maps.Equal(p.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", p.Labels, wantLabels)
	}
	if p.Annotations[annotationID] != s.ID || p.Namespace != cfg.Namespace {
		t.Errorf("annotations %v namespace %q", p.Annotations, p.Namespace)
	}
	if podFor(cfg, sandbox.Session{ID: "a"}).Labels[labelNetwork] != "deny" {
		t.Error("a session of no network policy is not denied")
	}

	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Error("service links are on")
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC || (spec.HostUsers != nil && *spec.HostUsers) {
		t.Error("a host namespace is shared")
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever || spec.Hostname != "sandbox" ||
		spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds > 5 {
		t.Errorf("restart %q hostname %q grace %v", spec.RestartPolicy, spec.Hostname, spec.TerminationGracePeriodSeconds)
	}
	if spec.RuntimeClassName != nil {
		t.Errorf("runtime class %q though none is configured", *spec.RuntimeClassName)
	}
	psc := spec.SecurityContext
	if psc == nil || !is(psc.RunAsNonRoot) || eq(psc.RunAsUser) != cfg.UID || eq(psc.RunAsGroup) != cfg.UID ||
		eq(psc.FSGroup) != cfg.UID || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}

	// Two containers, one for commands and one for shells, alike but for
	// their names: each a PID namespace of its own on the same volumes.
	if len(spec.Containers) != 2 || len(spec.InitContainers) != 0 || len(spec.EphemeralContainers) != 0 {
		t.Fatalf("containers %d", len(spec.Containers))
	}
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		t.Error("the containers share their processes")
	}
	// The commands' main process runs the commands, out of their reach.
	mains := map[string][]string{"sandbox": {cfg.Helper, "sandbox-pod", "idle", "-supervise"}, "shells": {cfg.Helper, "sandbox-pod", "idle"}}
	for i, name := range []string{"sandbox", "shells"} {
		c := spec.Containers[i]
		if c.Name != name || c.Image != cfg.Image || !slices.Equal(c.Command, mains[name]) || len(c.Args) != 0 {
			t.Errorf("container %q image %q command %q", c.Name, c.Image, c.Command)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !is(sc.ReadOnlyRootFilesystem) ||
			!is(sc.RunAsNonRoot) || sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s: container security context %+v", name, sc)
		}
		if len(c.Env) != 1 || c.Env[0] != (corev1.EnvVar{Name: "HOME", Value: homeDir}) {
			t.Errorf("%s: env %v: want HOME alone (PATH is the image's)", name, c.Env)
		}

		// Every writable place is an emptyDir of bounded size; /tmp in memory.
		wantVolumes := map[string]struct {
			size   resource.Quantity
			memory bool
		}{"/workspace": {cfg.WorkspaceMax, false}, homeDir: {cfg.HomeMax, false}, "/tmp": {cfg.TmpMax, true}}
		if len(c.VolumeMounts) != len(wantVolumes) || len(spec.Volumes) != len(wantVolumes) {
			t.Fatalf("%s: mounts %v volumes %v", name, c.VolumeMounts, spec.Volumes)
		}
		for _, m := range c.VolumeMounts {
			want, ok := wantVolumes[m.MountPath]
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
			if !ok || i < 0 || m.ReadOnly {
				t.Errorf("%s: mount %+v", name, m)
				continue
			}
			ed := spec.Volumes[i].EmptyDir
			if ed == nil || ed.SizeLimit == nil || ed.SizeLimit.Cmp(want.size) != 0 || (ed.Medium == corev1.StorageMediumMemory) != want.memory {
				t.Errorf("%s: volume at %s: %+v", name, m.MountPath, spec.Volumes[i].VolumeSource)
			}
		}
	}
}

// is and eq read optional fields of security contexts.
func is(b *bool) bool { return b != nil && *b }
func eq(i *int64) int64 {
	if i == nil {
		return -1
	}
	return *i
}

func TestPodLimits(t *testing.T) {
	cfg := testConfig()
	cfg.CPU, cfg.Memory = resource.MustParse("1500m"), resource.MustParse("3Gi")
	cfg.Ephemeral, cfg.WorkspaceMax, cfg.HomeMax = resource.MustParse("1Gi"), resource.MustParse("5Gi"), resource.MustParse("2Gi")
	containers := podFor(cfg, sandbox.Session{ID: "a"}).Spec.Containers
	commands, shells := containers[0].Resources, containers[1].Resources
	limits := map[corev1.ResourceName]string{
		corev1.ResourceCPU:    "1500m",
		corev1.ResourceMemory: "3Gi",
		// The disk emptyDirs count against ephemeral-storage.
		corev1.ResourceEphemeralStorage: "8Gi",
	}
	// The shells' container asks for a quarter of what it may use.
	quarter := map[corev1.ResourceName]string{
		corev1.ResourceCPU:              "375m",
		corev1.ResourceMemory:           "768Mi",
		corev1.ResourceEphemeralStorage: "2Gi",
	}
	for i, tc := range []struct {
		list corev1.ResourceList
		want map[corev1.ResourceName]string
	}{{commands.Limits, limits}, {commands.Requests, limits}, {shells.Limits, limits}, {shells.Requests, quarter}} {
		if len(tc.list) != len(tc.want) {
			t.Fatalf("%d: resources %v", i, tc.list)
		}
		for name, q := range tc.want {
			if got := tc.list[name]; got.Cmp(resource.MustParse(q)) != 0 {
				t.Errorf("%d: %s = %s, want %s", i, name, got.String(), q)
			}
		}
	}
}

func TestPodRuntimeClass(t *testing.T) {
	cfg := testConfig()
	cfg.RuntimeClass = "gvisor"
	rc := podFor(cfg, sandbox.Session{ID: "a"}).Spec.RuntimeClassName
	if rc == nil || *rc != "gvisor" {
		t.Fatalf("runtime class %v, want gvisor", rc)
	}
	if rc := warmPodFor(cfg, 0, 0).Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Fatalf("warm pod's runtime class %v", rc)
	}
}

func TestPodSessionKey(t *testing.T) {
	ids := []string{"a", "A", "_", "-x-", "check-7", strings.Repeat("Z", 80)}
	seen := map[string]string{}
	for _, id := range ids {
		k := sessionKey(id)
		if errs := validation.IsValidLabelValue(k); len(errs) > 0 || sessionKey(id) != k {
			t.Errorf("key of %q: %q %v", id, k, errs)
		}
		if errs := validation.IsDNS1123Label(sessionPodName(id)); len(errs) > 0 {
			t.Errorf("pod name of %q: %v", id, errs)
		}
		if other, ok := seen[k]; ok {
			t.Errorf("%q and %q share a key", id, other)
		}
		seen[k] = id
	}
}

func TestPodWarm(t *testing.T) {
	cfg := testConfig()
	p := warmPodFor(cfg, 3, 12)
	if p.Name != "atelier-warm-3-12" || p.Labels[labelPool] != poolWarm || p.Labels[labelNetwork] != networkDeny ||
		p.Labels[labelSession] != "" || p.Annotations[annotationID] != "" {
		t.Fatalf("warm pod %s %v %v", p.Name, p.Labels, p.Annotations)
	}
	if slot, gen, ok := parseWarmPodName(p.Name); !ok || slot != 3 || gen != 12 {
		t.Fatalf("parse %s: %d %d %v", p.Name, slot, gen, ok)
	}
	for _, bad := range []string{"atelier-warm-3", "atelier-warm-03-1", "atelier-warm-+3-1", "atelier-warm--1-2", "atelier-warm-1-2-3", sessionPodName("a")} {
		if _, _, ok := parseWarmPodName(bad); ok {
			t.Errorf("%q read as a warm pod's name", bad)
		}
	}
}

func TestPolicies(t *testing.T) {
	cfg := testConfig()
	cfg.ClusterNetworks = []netip.Prefix{
		netip.MustParsePrefix("10.244.0.0/16"),
		netip.MustParsePrefix("203.0.113.0/24"), // a cluster on public addresses
		netip.MustParsePrefix("fd00:10:96::/108"),
		netip.MustParsePrefix("::ffff:198.51.100.0/120"),
	}
	policies := networkPolicies(cfg)
	byName := map[string]*networkingv1.NetworkPolicy{}
	for _, p := range policies {
		if p.Namespace != cfg.Namespace {
			t.Errorf("%s in namespace %q", p.Name, p.Namespace)
		}
		byName[p.Name] = p
	}
	deny, allow := byName[policyDeny], byName[policyAllow]
	if len(policies) != 2 || deny == nil || allow == nil {
		t.Fatalf("policies %v", byName)
	}
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	for _, p := range policies {
		if !slices.Equal(p.Spec.PolicyTypes, both) || len(p.Spec.Ingress) != 0 {
			t.Errorf("%s: types %v ingress %v: want no ingress at all", p.Name, p.Spec.PolicyTypes, p.Spec.Ingress)
		}
	}
	if len(deny.Spec.Egress) != 0 {
		t.Errorf("the deny policy has egress rules: %v", deny.Spec.Egress)
	}

	selects := func(p *networkingv1.NetworkPolicy, podLabels map[string]string) bool {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		return sel.Matches(labels.Set(podLabels))
	}
	for _, pod := range []*corev1.Pod{
		podFor(cfg, sandbox.Session{ID: "d", Network: sandbox.Deny}),
		podFor(cfg, sandbox.Session{ID: "e"}),
		warmPodFor(cfg, 0, 0),
		{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelManagedBy: managedByAtelier}}},
	} {
		if !selects(deny, pod.Labels) || selects(allow, pod.Labels) {
			t.Errorf("pod labelled %v is not denied alone", pod.Labels)
		}
	}
	allowed := podFor(cfg, sandbox.Session{ID: "a", Network: sandbox.Allow})
	if selects(deny, allowed.Labels) || !selects(allow, allowed.Labels) {
		t.Errorf("pod labelled %v is not allowed alone", allowed.Labels)
	}

	if len(allow.Spec.Egress) != 2 {
		t.Fatalf("allow egress %v", allow.Spec.Egress)
	}
	blocks := map[string][]string{}
	for _, peer := range allow.Spec.Egress[0].To {
		if peer.IPBlock == nil || peer.PodSelector != nil || peer.NamespaceSelector != nil {
			t.Fatalf("internet peer %+v", peer)
		}
		blocks[peer.IPBlock.CIDR] = peer.IPBlock.Except
	}
	for _, want := range []string{"169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "0.0.0.0/8", "10.244.0.0/16", "203.0.113.0/24", "198.51.100.0/24"} {
		if !slices.Contains(blocks["0.0.0.0/0"], want) {
			t.Errorf("0.0.0.0/0 does not except %s: %v", want, blocks["0.0.0.0/0"])
		}
	}
	for _, want := range []string{"fc00::/7", "fe80::/10", "::1/128", "fd00:10:96::/108"} {
		if !slices.Contains(blocks["::/0"], want) {
			t.Errorf("::/0 does not except %s: %v", want, blocks["::/0"])
		}
	}
	for cidr, except := range blocks {
		outer := netip.MustParsePrefix(cidr)
		for _, e := range except {
			p := netip.MustParsePrefix(e)
			if !outer.Contains(p.Addr()) || p.Bits() <= outer.Bits() || p.Masked() != p {
				t.Errorf("except %s is not a proper sub-range of %s", e, cidr)
			}
		}
	}

	dns := allow.Spec.Egress[1]
	if len(dns.To) != 1 || dns.To[0].IPBlock != nil ||
		!maps.Equal(dns.To[0].NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": "kube-system"}) ||
		!maps.Equal(dns.To[0].PodSelector.MatchLabels, map[string]string{"k8s-app": "kube-dns"}) {
		t.Errorf("DNS peer %+v", dns.To)
	}
	var ports []string
	for _, p := range dns.Ports {
		ports = append(ports, string(*p.Protocol)+"/"+strconv.Itoa(p.Port.IntValue()))
	}
	if !slices.Equal(ports, []string{"UDP/53", "TCP/53"}) {
		t.Errorf("DNS ports %v", ports)
	}
}
