package kube

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// manifestsDir is deploy/kubernetes, from this package's folder.
const manifestsDir = "../../deploy/kubernetes"

// sandboxNamespace is the manifests' sandbox namespace.
const sandboxNamespace = "atelier-sandbox"

// loadManifests decodes every document of every YAML file of
// deploy/kubernetes strictly: a field no kind has, or a kind none of
// core, apps, rbac and networking has, fails the test.
func loadManifests(t *testing.T) []runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestsDir, err)
	}
	var objs []runtime.Object
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if isComments(doc) {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s, document %d: %v", filepath.Base(file), i, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// isComments: a YAML document of nothing but comments and blank lines.
func isComments(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := loadManifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests (%v)", k, kinds)
		}
	}
}

// TestManifestsStrictRefusesUnknownFields: the decoder above would catch
// a misspelt field (a test that cannot fail is a defect).
func TestManifestsStrictRefusesUnknownFields(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	if _, _, err := decoder.Decode([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\nspec: {finalizerz: []}\n"), nil, nil); err == nil {
		t.Fatal("an unknown field decoded")
	}
	if _, _, err := decoder.Decode([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"), nil, nil); err == nil {
		t.Fatal("an unregistered kind decoded")
	}
}

func TestManifestsRoleIsAPIVerbs(t *testing.T) {
	var roles []*rbacv1.Role
	for _, o := range loadManifests(t) {
		if r, ok := o.(*rbacv1.Role); ok {
			roles = append(roles, r)
		}
	}
	if len(roles) != 1 || roles[0].Namespace != sandboxNamespace {
		t.Fatalf("want one Role, in %s: %v", sandboxNamespace, roles)
	}
	var granted []string
	for _, rule := range roles[0].Rules {
		if len(rule.ResourceNames) != 0 || len(rule.NonResourceURLs) != 0 {
			t.Errorf("rule %+v names resources or URLs", rule)
		}
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				for _, v := range rule.Verbs {
					granted = append(granted, g+" "+r+" "+v)
				}
			}
		}
	}
	var used []string
	for r, verbs := range apiVerbs {
		for _, v := range verbs {
			used = append(used, apiResources[r].Group+" "+r+" "+v)
		}
	}
	sort.Strings(granted)
	sort.Strings(used)
	if !slices.Equal(granted, used) {
		t.Fatalf("the Role grants\n%v\nthe provider uses\n%v", granted, used)
	}

	var bound bool
	for _, o := range loadManifests(t) {
		if b, ok := o.(*rbacv1.RoleBinding); ok && b.Namespace == sandboxNamespace && b.RoleRef.Kind == "Role" && b.RoleRef.Name == roles[0].Name {
			for _, s := range b.Subjects {
				bound = bound || (s.Kind == "ServiceAccount" && s.Name == "atelier" && s.Namespace == "atelier")
			}
		}
	}
	if !bound {
		t.Error("no RoleBinding gives the Role to the atelier ServiceAccount")
	}
}

func TestManifestsPoliciesAreNetworkPolicies(t *testing.T) {
	cfg := testConfig()
	cfg.Namespace = sandboxNamespace
	want := map[string]*networkingv1.NetworkPolicy{}
	for _, p := range networkPolicies(cfg) {
		want[p.Name] = p
	}
	got := 0
	for _, o := range loadManifests(t) {
		p, ok := o.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		got++
		w := want[p.Name]
		if w == nil {
			t.Errorf("the manifests have a NetworkPolicy %s that networkPolicies has not", p.Name)
			continue
		}
		if p.Namespace != w.Namespace || !equality.Semantic.DeepEqual(p.Labels, w.Labels) || !equality.Semantic.DeepEqual(p.Spec, w.Spec) {
			t.Errorf("NetworkPolicy %s:\n%+v\nwant\n%+v", p.Name, p, w)
		}
	}
	if got != len(want) {
		t.Errorf("%d NetworkPolicies in the manifests, want %d", got, len(want))
	}
}

func TestManifestsNamespacesAndDeployment(t *testing.T) {
	var deployments []*appsv1.Deployment
	for _, o := range loadManifests(t) {
		switch o := o.(type) {
		case *corev1.Namespace:
			if o.Name != sandboxNamespace {
				continue
			}
			for _, mode := range []string{"enforce", "warn", "audit"} {
				if v := o.Labels["pod-security.kubernetes.io/"+mode]; v != "restricted" {
					t.Errorf("sandbox namespace's %s level is %q", mode, v)
				}
			}
		case *appsv1.Deployment:
			deployments = append(deployments, o)
		}
	}
	if len(deployments) != 1 {
		t.Fatalf("%d Deployments", len(deployments))
	}
	d := deployments[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v, want at least 2", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	psc := spec.SecurityContext
	if psc == nil || !is(psc.RunAsNonRoot) || eq(psc.RunAsUser) <= 0 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC || spec.ServiceAccountName != "atelier" {
		t.Errorf("host namespaces or service account %q", spec.ServiceAccountName)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !is(sc.ReadOnlyRootFilesystem) ||
			!is(sc.RunAsNonRoot) || is(sc.Privileged) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		for name, value := range map[string]string{
			"ATELIER_SANDBOX_PROVIDER": "kube", "ATELIER_KUBE_NAMESPACE": sandboxNamespace, "ATELIER_KUBE_NETWORK_POLICIES": "enforced",
		} {
			if env[name].Value != value {
				t.Errorf("%s=%q, want %q", name, env[name].Value, value)
			}
		}
		if env["ATELIER_KUBE_IMAGE"].Value == "" {
			t.Error("no ATELIER_KUBE_IMAGE")
		}
		// The server's real names (server/config.go), from the Secret.
		for _, name := range []string{"DATABASE_URL", "ATELIER_S3_ENDPOINT", "ATELIER_S3_BUCKET", "ATELIER_S3_ACCESS_KEY", "ATELIER_S3_SECRET_KEY", "ATELIER_CLUSTER_SECRET"} {
			if e, ok := env[name]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s does not come from a Secret: %+v", name, e)
			}
		}
	}
}
