package k8s

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// externalSecrets are Secrets the manifests read but do not create: the
// apps' own, and the Redis password that docs/kubernetes.md has users create.
var externalSecrets = map[string]bool{"webhook-app": true, "billing-api": true, "webhook-dedup-redis": true}

// resolvePort turns a port given by number or by name into a number, the
// name looked up among the ports of cs.
func resolvePort(port intstr.IntOrString, cs ...*corev1.Container) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// selects says whether a Service-style selector picks pods with these
// labels; an empty selector picks none (a Service without one has its
// endpoints managed by hand).
func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func selectorMatches(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

func hasIngress(np *networkingv1.NetworkPolicy) bool {
	return len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

// restricted says whether every peer names particular namespaces or pods,
// rather than everyone.
func restricted(peers []networkingv1.NetworkPolicyPeer) bool {
	if len(peers) == 0 {
		return false
	}
	for _, peer := range peers {
		switch {
		case peer.IPBlock != nil:
			return false
		case peer.NamespaceSelector != nil && len(peer.NamespaceSelector.MatchLabels)+len(peer.NamespaceSelector.MatchExpressions) == 0:
			return false
		case peer.NamespaceSelector == nil && peer.PodSelector == nil:
			return false
		}
	}
	return true
}

// expansion matches the kubelet's $(NAME) references in env values, command
// and args.
var expansion = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkExpansions: each $(NAME) refers to a variable defined before it (in
// envFrom or earlier in env); otherwise the kubelet leaves the text as it is.
func checkExpansions(t *testing.T, m *manifests, where string, spec *corev1.PodSpec) {
	t.Helper()
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		defined := map[string]bool{}
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil {
				for k := range m.configMaps[from.ConfigMapRef.Name].Data {
					defined[from.Prefix+k] = true
				}
			}
			if from.SecretRef != nil {
				for k := range m.secrets[from.SecretRef.Name].Data {
					defined[from.Prefix+k] = true
				}
			}
		}
		for _, e := range c.Env {
			for _, ref := range expansion.FindAllStringSubmatch(e.Value, -1) {
				if !defined[ref[1]] {
					t.Errorf("%s: container %s's %s refers to $(%s) before it is defined", where, c.Name, e.Name, ref[1])
				}
			}
			defined[e.Name] = true
		}
		for _, arg := range slices.Concat(c.Command, c.Args) {
			for _, ref := range expansion.FindAllStringSubmatch(arg, -1) {
				if !defined[ref[1]] {
					t.Errorf("%s: container %s's command refers to $(%s), which its env does not define", where, c.Name, ref[1])
				}
			}
		}
	}
}

// checkHardened: the container cannot run as root, write its image, gain
// privileges or capabilities, or make syscalls outside the runtime's
// default seccomp profile. Pod-level settings count where the container
// leaves them unset.
func checkHardened(t *testing.T, where string, spec *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: container %s has no securityContext", where, c.Name)
		return
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	runAsNonRoot := firstNonNil(sc.RunAsNonRoot, psc.RunAsNonRoot)
	runAsUser := firstNonNil(sc.RunAsUser, psc.RunAsUser)
	seccomp := firstNonNil(sc.SeccompProfile, psc.SeccompProfile)
	switch {
	case runAsNonRoot == nil || !*runAsNonRoot:
		t.Errorf("%s: container %s lacks runAsNonRoot: true", where, c.Name)
	case runAsUser != nil && *runAsUser == 0:
		t.Errorf("%s: container %s runs as uid 0", where, c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: container %s lacks readOnlyRootFilesystem: true", where, c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: container %s lacks allowPrivilegeEscalation: false", where, c.Name)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: container %s is privileged", where, c.Name)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: container %s must drop ALL capabilities and add none", where, c.Name)
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: container %s lacks seccompProfile RuntimeDefault", where, c.Name)
	}
}

func firstNonNil[T any](vs ...*T) *T {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

// checkReferences: every ConfigMap and Secret a container reads is rendered
// and has the key, or is a Secret users create themselves.
func checkReferences(t *testing.T, m *manifests, where string, spec *corev1.PodSpec) {
	t.Helper()
	secret := func(c, name, key string, optional *bool) {
		s, ok := m.secrets[name]
		switch {
		case !ok && !externalSecrets[name]:
			t.Errorf("%s: container %s reads Secret %q, which is neither rendered nor one users create (externalSecrets)", where, c, name)
		case ok && key != "" && s.Data[key] == nil && s.StringData[key] == "" && (optional == nil || !*optional):
			t.Errorf("%s: container %s reads key %q of Secret %q, which has no such key", where, c, key, name)
		}
	}
	configMap := func(c, name, key string, optional *bool) {
		cm, ok := m.configMaps[name]
		if !ok {
			t.Errorf("%s: container %s reads ConfigMap %q, which is not rendered", where, c, name)
			return
		}
		if _, found := cm.Data[key]; key != "" && !found && (optional == nil || !*optional) {
			t.Errorf("%s: container %s reads key %q of ConfigMap %q, which has no such key", where, c, key, name)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil {
				configMap(c.Name, from.ConfigMapRef.Name, "", from.ConfigMapRef.Optional)
			}
			if from.SecretRef != nil {
				secret(c.Name, from.SecretRef.Name, "", from.SecretRef.Optional)
			}
		}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
			case e.ValueFrom.ConfigMapKeyRef != nil:
				configMap(c.Name, e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key, e.ValueFrom.ConfigMapKeyRef.Optional)
			case e.ValueFrom.SecretKeyRef != nil:
				secret(c.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, e.ValueFrom.SecretKeyRef.Optional)
			case e.ValueFrom.ResourceFieldRef != nil:
				res := corev1.ResourceName(strings.TrimPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits."))
				if _, ok := c.Resources.Limits[res]; strings.HasPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits.") && !ok {
					t.Errorf("%s: container %s's %s reads limits.%s, which it does not set (the node's capacity would be used)", where, c.Name, e.Name, res)
				}
			}
		}
	}
}

// checkImages: every image names a version; latest or no tag would change
// under a running Deployment.
func checkImages(t *testing.T, where string, spec *corev1.PodSpec) {
	t.Helper()
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		last := c.Image[strings.LastIndex(c.Image, "/")+1:]
		if strings.Contains(last, "@sha256:") {
			continue
		}
		_, tag, ok := strings.Cut(last, ":")
		if !ok || tag == "latest" {
			t.Errorf("%s: container %s's image %q names no version", where, c.Name, c.Image)
		}
	}
}

// checkDisruptionBudget: exactly one PodDisruptionBudget covers the pods,
// and it lets a drain proceed.
func checkDisruptionBudget(t *testing.T, m *manifests, where string, podLabels map[string]string, replicas *int32) {
	t.Helper()
	n := int32(1)
	if replicas != nil {
		n = *replicas
	}
	found := 0
	for _, pdb := range m.pdbs {
		if pdb.Spec.Selector == nil || !selectorMatches(t, pdb.Spec.Selector, podLabels) {
			continue
		}
		found++
		switch spec := pdb.Spec; {
		case spec.MaxUnavailable != nil:
			if v, err := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, int(n), true); err != nil || v < 1 {
				t.Errorf("%s: PodDisruptionBudget %s maxUnavailable %s allows no disruption", where, pdb.Name, spec.MaxUnavailable.String())
			}
		case spec.MinAvailable != nil:
			if v, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, int(n), true); err != nil || v >= int(n) {
				t.Errorf("%s: PodDisruptionBudget %s minAvailable %s with %d replicas blocks every drain", where, pdb.Name, spec.MinAvailable.String(), n)
			}
		}
	}
	if found != 1 {
		t.Errorf("%s: %d PodDisruptionBudgets select the pods, want 1", where, found)
	}
}
