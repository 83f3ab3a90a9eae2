package server

import (
	"strings"
	"testing"
)

// ATELIER_SANDBOX_PROVIDER=kube reads the cluster's settings, bounds each
// pod by the settings that bound the local jail, and refuses to run
// unless the operator vouches that NetworkPolicies are enforced.
func TestConfigOfTheKubeProvider(t *testing.T) {
	load := func(extra map[string]string) (Config, error) {
		return LoadConfig(func(k string) string { return extra[k] })
	}
	cfg, err := load(nil)
	if err != nil || cfg.Kube != nil {
		t.Fatalf("by default: %+v %v", cfg.Kube, err)
	}
	kube := map[string]string{
		"ATELIER_SANDBOX_PROVIDER":      "kube",
		"ATELIER_KUBE_NAMESPACE":        "atelier-sandbox",
		"ATELIER_KUBE_IMAGE":            "registry.example/sandbox:1",
		"ATELIER_KUBE_NETWORK_POLICIES": "enforced",
		"ATELIER_KUBE_WARM_PODS":        "3",
		"ATELIER_KUBE_CLUSTER_CIDRS":    "10.96.0.0/12, fd00:10::/108",
		"ATELIER_SANDBOX_DISK_BYTES":    "1073741824",
	}
	cfg, err = load(kube)
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Kube
	if k == nil || k.Namespace != "atelier-sandbox" || k.WarmPods != 3 || len(k.ClusterNetworks) != 2 ||
		k.WorkspaceMax.Value() != 1<<30 || k.UID == 0 || k.Helper == "" {
		t.Fatalf("kube settings: %+v", k)
	}
	for name, bad := range map[string]string{
		"ATELIER_KUBE_NETWORK_POLICIES": "yes",
		"ATELIER_SANDBOX_PROVIDER":      "docker",
		"ATELIER_KUBE_WARM_PODS":        "-1",
		"ATELIER_KUBE_NAMESPACE":        "Not_A_Namespace",
		"ATELIER_KUBE_IMAGE":            "",
		"ATELIER_KUBE_CLUSTER_CIDRS":    "10.96.0.0",
	} {
		env := map[string]string{}
		for k, v := range kube {
			env[k] = v
		}
		env[name] = bad
		if _, err := load(env); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(name, "ATELIER_")) && !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v", name, bad, err)
		}
	}
}
