// Package kube runs sessions' code on Kubernetes: a pod per edit session,
// reached from any instance through the pods/exec subresource, behind the
// same sandbox.Provider interface as this host's jail.
package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Config is the operator's choice of where and how sandbox pods run
// (ATELIER_KUBE_* settings; server/config.go reads them).
type Config struct {
	// Namespace holds the sandbox pods and their NetworkPolicies; the
	// instances' Role grants its verbs there alone.
	Namespace string
	// Image is the sandbox pods' image: the toolchains people's commands
	// use, and this binary at Helper, which runs each command inside.
	Image string
	// Helper is where Image holds this binary; "" is DefaultHelper.
	Helper string
	// Workspace is where a pod's workspace is mounted, its commands' top
	// folder; "" is /workspace.
	Workspace string
	// RuntimeClass, when set, names a RuntimeClass (gVisor, Kata) the
	// pods run under.
	RuntimeClass string
	// PoliciesEnforced is the operator's word that the cluster's network
	// plugin enforces NetworkPolicies (ATELIER_KUBE_NETWORK_POLICIES=
	// enforced): one that does not ignores them silently, and a session
	// denied the network would reach it.
	PoliciesEnforced bool
	// ClusterNetworks are the pod and service ranges, which a session
	// allowed the internet still may not reach, besides the private and
	// link-local ranges.
	ClusterNetworks []netip.Prefix
	// UID is the pods' user and group: a pod is its session's own
	// machine, so one uid serves every session.
	UID int64
	// Resources of each pod, from the settings that bound the local jail.
	CPU          resource.Quantity
	Memory       resource.Quantity
	Ephemeral    resource.Quantity // the pod's writable layers and logs
	WorkspaceMax resource.Quantity // /workspace's emptyDir
	HomeMax      resource.Quantity // HOME's emptyDir
	TmpMax       resource.Quantity // /tmp's emptyDir, in memory
	// WarmPods is how many pods wait, started, for sessions' first
	// commands.
	WarmPods int
}

// DefaultHelper is where the sandbox image keeps this binary.
const DefaultHelper = "/usr/local/bin/atelier"

// Defaults fills what the operator left unset.
func (c Config) Defaults() Config {
	if c.Helper == "" {
		c.Helper = DefaultHelper
	}
	if c.Workspace == "" {
		c.Workspace = "/workspace"
	}
	if c.UID == 0 {
		c.UID = 1000
	}
	set := func(q *resource.Quantity, v string) {
		if q.IsZero() {
			*q = resource.MustParse(v)
		}
	}
	set(&c.CPU, "2")
	set(&c.Memory, "2Gi")
	set(&c.Ephemeral, "1Gi")
	set(&c.WorkspaceMax, "4Gi")
	set(&c.HomeMax, "1Gi")
	set(&c.TmpMax, "256Mi")
	return c
}

// ErrPoliciesUnconfirmed: the operator has not said that NetworkPolicies
// are enforced, so a session's network policy could not be relied on.
var ErrPoliciesUnconfirmed = errors.New("kube: set ATELIER_KUBE_NETWORK_POLICIES=enforced once the cluster's network plugin enforces NetworkPolicies (Calico, Cilium, ...); without it a session denied the network would reach it")

// A DNS-1123 label: what a namespace's name must be.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Check says what is wrong with the configuration, in the operator's
// terms.
func (c Config) Check() error {
	switch {
	case !dnsLabel.MatchString(c.Namespace):
		return fmt.Errorf("kube: ATELIER_KUBE_NAMESPACE must name a namespace (a DNS label), got %q", c.Namespace)
	case c.Image == "":
		return errors.New("kube: ATELIER_KUBE_IMAGE must name the sandbox image")
	case !c.PoliciesEnforced:
		return ErrPoliciesUnconfirmed
	case c.UID <= 0:
		return fmt.Errorf("kube: the sandbox uid must not be root, got %d", c.UID)
	case !path.IsAbs(c.Workspace) || path.Clean(c.Workspace) != c.Workspace || c.Workspace == "/":
		return fmt.Errorf("kube: the pods' workspace must be a clean absolute folder below /, got %q", c.Workspace)
	case c.WarmPods < 0:
		return fmt.Errorf("kube: ATELIER_KUBE_WARM_PODS must be a count, got %d", c.WarmPods)
	}
	return nil
}
