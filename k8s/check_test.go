package k8s

import (
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// unrenderedSecret stands for the value of a key of a Secret the manifests
// refer to but do not hold (one the operator creates, such as the Redis
// password): hex, as docs/kubernetes.md has it made, since it may go into
// a URL.
const unrenderedSecret = "0123456789abcdef"

// checkStarts runs `webhook-dedup check` with exactly the environment the
// kubelet would give the sidecar, and requires it to pass: no variant
// ships a configuration the sidecar refuses at start. The store is not
// contacted, so the base's placeholder URLs do.
func checkStarts(t *testing.T, binary string, p *pod) {
	t.Helper()
	env, err := p.kubeletEnv(t.TempDir)
	if err != nil {
		t.Errorf("%s: %v", p.name, err)
		return
	}
	var list []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		list = append(list, k+"="+env[k])
	}
	cmd := exec.Command(binary, "check")
	cmd.Env = list
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("%s: the sidecar would not start: webhook-dedup check: %v\n%s\nwith the environment:\n%s", p.name, err, stderr.String(), strings.Join(list, "\n"))
		return
	}
	if !strings.HasPrefix(stdout.String(), "configuration OK") {
		t.Errorf("%s: webhook-dedup check printed %q, want its OK line", p.name, stdout.String())
	}
}

// kubeletEnv is the sidecar's environment as the kubelet makes it in
// namespace "default": what the manifests fix, with the downward API's
// fields and resources filled in and $(NAME) references expanded in order.
// An optional reference to a Secret or ConfigMap that is not rendered is
// left out (as when it does not exist yet); a required one stands for
// unrenderedSecret. A value naming a volume's mount path, or a path under
// it, is moved into a directory of tempDir's, the volume's stand-in.
func (p *pod) kubeletEnv(tempDir func() string) (map[string]string, error) {
	env := maps.Clone(p.env)
	for _, e := range p.sidecar.Env {
		src := e.ValueFrom
		switch {
		case src == nil:
			env[e.Name] = expansion.ReplaceAllStringFunc(e.Value, func(ref string) string {
				if v, ok := env[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref // the kubelet leaves an undefined reference as it is
			})
		case src.FieldRef != nil:
			v, err := p.field(src.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.Name, err)
			}
			env[e.Name] = v
		case src.ResourceFieldRef != nil:
			v, err := p.resource(src.ResourceFieldRef)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.Name, err)
			}
			env[e.Name] = v
		case src.SecretKeyRef != nil:
			if _, fixed := p.env[e.Name]; !fixed && (src.SecretKeyRef.Optional == nil || !*src.SecretKeyRef.Optional) {
				env[e.Name] = unrenderedSecret
			}
		case src.ConfigMapKeyRef != nil:
			if _, fixed := p.env[e.Name]; !fixed && (src.ConfigMapKeyRef.Optional == nil || !*src.ConfigMapKeyRef.Optional) {
				return nil, fmt.Errorf("%s: ConfigMap %s is not rendered", e.Name, src.ConfigMapKeyRef.Name)
			}
		}
	}
	for _, vm := range p.sidecar.VolumeMounts {
		mount := strings.TrimSuffix(vm.MountPath, "/")
		var dir string
		for k, v := range env {
			if v == mount || strings.HasPrefix(v, mount+"/") {
				if dir == "" {
					dir = tempDir()
				}
				env[k] = dir + strings.TrimPrefix(v, mount)
			}
		}
	}
	return env, nil
}

// field is a downward API field of the pod, in namespace "default".
func (p *pod) field(path string) (string, error) {
	if path == "metadata.namespace" {
		return "default", nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		if v, ok := p.labels[strings.TrimSuffix(k, "']")]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("fieldRef %s: not one the test knows", path)
}

// resource is a container's resource as the downward API gives it: its
// limit or request in the divisor's units (1: bytes and whole cores),
// rounded up.
func (p *pod) resource(ref *corev1.ResourceFieldSelector) (string, error) {
	c := p.sidecar
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		return "", fmt.Errorf("resourceFieldRef of container %s: not one the test knows", ref.ContainerName)
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s: the sidecar sets none (the kubelet would use the node's)", ref.Resource)
	}
	divisor := resource.MustParse("1")
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor
	}
	m, d := q.MilliValue(), divisor.MilliValue()
	return fmt.Sprint((m + d - 1) / d), nil
}
