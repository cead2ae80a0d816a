package k8s

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// sidecarName is the container name webhook-dedup runs under in every
// manifest.
const sidecarName = "webhook-dedup"

// goRuntimeVariables are read by the Go runtime in the binary rather than by
// its configuration, so -h does not list them.
var goRuntimeVariables = map[string]bool{"GOMEMLIMIT": true, "GOGC": true, "GOMAXPROCS": true, "GODEBUG": true}

// externalSecrets are Secrets the manifests read but do not create: the
// apps' own, and the Redis password that K8S_README.md has users create.
var externalSecrets = map[string]bool{"webhook-app": true, "billing-api": true, "webhook-dedup-redis": true}

func TestRender(t *testing.T) {
	for _, v := range variants {
		t.Run(v.dir, func(t *testing.T) {
			t.Parallel()
			m := render(t, v.dir)
			if m.objects == 0 {
				t.Fatal("rendered no objects")
			}
			for _, err := range validateNames(m) {
				t.Error(err)
			}
		})
	}
}

// validateNames applies the API server's name rules the typed structs do
// not: DNS names, label syntax, container and port names.
func validateNames(m *manifests) []error {
	var errs []error
	check := func(what string, problems []string) {
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("%s: %s", what, p))
		}
	}
	checkLabels := func(what string, l map[string]string) {
		for k, v := range l {
			check(what+" label key "+k, validation.IsQualifiedName(k))
			check(what+" label "+k+" value "+v, validation.IsValidLabelValue(v))
		}
	}
	checkPod := func(what string, tmpl *corev1.PodTemplateSpec) {
		checkLabels(what+" pod template", tmpl.Labels)
		for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
			check(what+" container "+c.Name, validation.IsDNS1123Label(c.Name))
			for _, p := range c.Ports {
				if p.Name != "" {
					check(what+" container "+c.Name+" port "+p.Name, validation.IsValidPortName(p.Name))
				}
			}
		}
	}
	for _, o := range allObjects(m) {
		what := o.kind + " " + o.meta.Name
		if o.kind == "Service" {
			check(what, validation.IsDNS1035Label(o.meta.Name))
		} else {
			check(what, validation.IsDNS1123Subdomain(o.meta.Name))
		}
		checkLabels(what, o.meta.Labels)
	}
	for _, d := range m.deployments {
		checkPod("Deployment "+d.Name, &d.Spec.Template)
	}
	for _, s := range m.statefulSets {
		checkPod("StatefulSet "+s.Name, &s.Spec.Template)
	}
	return errs
}

type namedObject struct {
	kind string
	meta *metav1.ObjectMeta
}

func allObjects(m *manifests) []namedObject {
	var out []namedObject
	for _, o := range m.deployments {
		out = append(out, namedObject{"Deployment", &o.ObjectMeta})
	}
	for _, o := range m.statefulSets {
		out = append(out, namedObject{"StatefulSet", &o.ObjectMeta})
	}
	for _, o := range m.services {
		out = append(out, namedObject{"Service", &o.ObjectMeta})
	}
	for _, o := range m.configMaps {
		out = append(out, namedObject{"ConfigMap", &o.ObjectMeta})
	}
	for _, o := range m.secrets {
		out = append(out, namedObject{"Secret", &o.ObjectMeta})
	}
	for _, o := range m.networkPolicies {
		out = append(out, namedObject{"NetworkPolicy", &o.ObjectMeta})
	}
	for _, o := range m.pdbs {
		out = append(out, namedObject{"PodDisruptionBudget", &o.ObjectMeta})
	}
	for _, o := range m.serviceMonitors {
		out = append(out, namedObject{"ServiceMonitor", &o.ObjectMeta})
	}
	return out
}

// TestSidecarInvariants checks, in every variant, what keeps webhooks from
// bypassing deduplication and the pod from losing them on the way down.
func TestSidecarInvariants(t *testing.T) {
	known := binaryVariables(t, builtBinary(t).binary)
	for _, v := range variants {
		t.Run(v.dir, func(t *testing.T) {
			t.Parallel()
			m := render(t, v.dir)
			if len(m.deployments) == 0 {
				t.Fatal("no Deployment")
			}
			var pods []*pod
			for _, d := range m.deployments {
				p := newPod(t, m, "Deployment "+d.Name, &d.Spec.Template, known)
				p.checkPlacement(t, v.native)
				p.checkEnvNames(t, known)
				p.checkPorts(t)
				p.checkProbes(t)
				p.checkServices(t)
				p.checkNetworkPolicies(t)
				p.checkAppOnLoopback(t)
				p.checkShutdown(t)
				p.checkResources(t)
				checkHardened(t, p.name, p.spec, p.sidecar)
				checkReferences(t, m, p.name, p.spec)
				checkExpansions(t, m, p.name, p.spec)
				checkImages(t, p.name, p.spec)
				checkDisruptionBudget(t, m, p.name, p.labels, d.Spec.Replicas)
				pods = append(pods, p)
			}
			for _, s := range m.statefulSets {
				checkRedis(t, m, s, pods)
			}
			for _, sm := range m.serviceMonitors {
				checkServiceMonitor(t, m, sm, pods)
			}
		})
	}
}

// pod is a pod template that carries the sidecar, with the sidecar's
// configuration resolved.
type pod struct {
	m       *manifests
	name    string
	spec    *corev1.PodSpec
	labels  map[string]string
	sidecar *corev1.Container
	native  bool // the sidecar is an init container
	apps    []*corev1.Container
	// env holds the sidecar's variables whose values the manifests fix.
	env map[string]string
	// names lists every variable set for the sidecar, fixed or not.
	names []string
	// defaults are the binary's defaults, from -h.
	defaults map[string]string
}

func newPod(t *testing.T, m *manifests, name string, tmpl *corev1.PodTemplateSpec, defaults map[string]string) *pod {
	t.Helper()
	p := &pod{m: m, name: name, spec: &tmpl.Spec, labels: tmpl.Labels, defaults: defaults}
	for i := range tmpl.Spec.InitContainers {
		if c := &tmpl.Spec.InitContainers[i]; c.Name == sidecarName {
			p.sidecar, p.native = c, true
		}
	}
	for i := range tmpl.Spec.Containers {
		c := &tmpl.Spec.Containers[i]
		if c.Name != sidecarName {
			p.apps = append(p.apps, c)
		} else if p.sidecar == nil {
			p.sidecar = c
		} else {
			t.Fatalf("%s: two containers named %s", name, sidecarName)
		}
	}
	if p.sidecar == nil {
		t.Fatalf("%s: no container named %s", name, sidecarName)
	}
	var errs []error
	p.env, p.names, errs = resolveEnv(m, p.sidecar)
	for _, err := range errs {
		t.Errorf("%s: %v", name, err)
	}
	return p
}

// setting is the value the sidecar runs with: the manifests' or else the
// binary's default.
func (p *pod) setting(name string) string {
	if v, ok := p.env[name]; ok {
		return v
	}
	return p.defaults[name]
}

// resolveEnv follows a container's env and envFrom through the rendered
// ConfigMaps and Secrets, as the kubelet would: env wins over envFrom.
func resolveEnv(m *manifests, c *corev1.Container) (values map[string]string, names []string, errs []error) {
	values = map[string]string{}
	set := func(name, value string, known bool) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		if known {
			values[name] = value
		} else {
			delete(values, name)
		}
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := m.configMaps[from.ConfigMapRef.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("container %s: envFrom ConfigMap %q is not rendered, so its keys cannot be checked", c.Name, from.ConfigMapRef.Name))
				continue
			}
			for k, v := range cm.Data {
				set(from.Prefix+k, v, true)
			}
		case from.SecretRef != nil:
			s, ok := m.secrets[from.SecretRef.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("container %s: envFrom Secret %q is not rendered, so its keys cannot be checked", c.Name, from.SecretRef.Name))
				continue
			}
			for k, v := range s.Data {
				set(from.Prefix+k, string(v), true)
			}
			for k, v := range s.StringData {
				set(from.Prefix+k, v, true)
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, e.Value, true)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			cm, ok := m.configMaps[e.ValueFrom.ConfigMapKeyRef.Name]
			v, found := "", false
			if ok {
				v, found = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			}
			set(e.Name, v, found)
		case e.ValueFrom.SecretKeyRef != nil:
			s, ok := m.secrets[e.ValueFrom.SecretKeyRef.Name]
			var v []byte
			found := false
			if ok {
				v, found = s.Data[e.ValueFrom.SecretKeyRef.Key]
			}
			set(e.Name, string(v), found)
		default:
			set(e.Name, "", false)
		}
	}
	slices.Sort(names)
	return values, names, errs
}

func (p *pod) checkPlacement(t *testing.T, native bool) {
	t.Helper()
	switch {
	case native && !p.native:
		t.Errorf("%s: %s is not a native sidecar (an init container with restartPolicy: Always)", p.name, sidecarName)
	case native && (p.sidecar.RestartPolicy == nil || *p.sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways):
		t.Errorf("%s: init container %s lacks restartPolicy: Always, so the app would wait for it to exit", p.name, sidecarName)
	case !native && p.native:
		t.Errorf("%s: the classic variant has %s as an init container, which clusters before 1.29 would run to completion first", p.name, sidecarName)
	case !native && p.sidecar.RestartPolicy != nil:
		t.Errorf("%s: restartPolicy is set on a regular container, which clusters without native sidecars reject", p.name)
	}
	if native {
		return
	}
	for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			t.Errorf("%s: container %s uses the preStop sleep action, which clusters before 1.30 reject", p.name, c.Name)
		}
	}
}

// checkEnvNames: every variable set for the sidecar is one the binary reads,
// one the Go runtime reads, or one that exists to be expanded ($(NAME)) into
// another variable.
func (p *pod) checkEnvNames(t *testing.T, known map[string]string) {
	t.Helper()
	var expanded []string
	for _, e := range p.sidecar.Env {
		for _, ref := range expansion.FindAllStringSubmatch(e.Value, -1) {
			expanded = append(expanded, ref[1])
		}
	}
	for _, name := range p.names {
		if _, ok := known[name]; !ok && !goRuntimeVariables[name] && !slices.Contains(expanded, name) {
			t.Errorf("%s: %s is set for %s, but `webhook-dedup -h` does not list it", p.name, name, sidecarName)
		}
	}
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

// containerPort returns the sidecar's port by name; 0 if it has none.
func (p *pod) containerPort(name string) int32 {
	for _, port := range p.sidecar.Ports {
		if port.Name == name {
			return port.ContainerPort
		}
	}
	return 0
}

func (p *pod) checkPorts(t *testing.T) {
	t.Helper()
	for _, tt := range []struct{ variable, port string }{{"LISTEN_ADDR", "webhooks"}, {"ADMIN_ADDR", "admin"}} {
		_, port, err := net.SplitHostPort(p.setting(tt.variable))
		if err != nil {
			t.Errorf("%s: %s=%q: %v", p.name, tt.variable, p.setting(tt.variable), err)
			continue
		}
		if got := p.containerPort(tt.port); fmt.Sprint(got) != port {
			t.Errorf("%s: containerPort %q is %d, but %s listens on %s", p.name, tt.port, got, tt.variable, port)
		}
	}
	if len(p.sidecar.Ports) != 2 {
		t.Errorf("%s: %s declares %d ports, want webhooks and admin", p.name, sidecarName, len(p.sidecar.Ports))
	}
}

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

func (p *pod) checkProbes(t *testing.T) {
	t.Helper()
	admin := p.containerPort("admin")
	for _, tt := range []struct {
		kind     string
		probe    *corev1.Probe
		path     string
		required bool
	}{
		{"liveness", p.sidecar.LivenessProbe, "/healthz", true},
		{"readiness", p.sidecar.ReadinessProbe, "/readyz", true},
		{"startup", p.sidecar.StartupProbe, "/healthz", false},
	} {
		switch {
		case tt.probe == nil && tt.required:
			t.Errorf("%s: %s has no %s probe", p.name, sidecarName, tt.kind)
		case tt.probe == nil:
		case tt.probe.HTTPGet == nil:
			t.Errorf("%s: %s's %s probe is not an HTTP GET", p.name, sidecarName, tt.kind)
		case tt.probe.HTTPGet.Path != tt.path || resolvePort(tt.probe.HTTPGet.Port, p.sidecar) != admin:
			t.Errorf("%s: %s's %s probe asks %s on port %s, want %s on the admin port %d",
				p.name, sidecarName, tt.kind, tt.probe.HTTPGet.Path, tt.probe.HTTPGet.Port.String(), tt.path, admin)
		}
	}
}

// selects says whether a Service-style selector picks pods with these
// labels; an empty selector picks none (a Service without one has its
// endpoints managed by hand).
func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func (p *pod) checkServices(t *testing.T) {
	t.Helper()
	webhooks, admin := p.containerPort("webhooks"), p.containerPort("admin")
	reached := false
	for _, svc := range p.m.services {
		if !selects(svc.Spec.Selector, p.labels) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port) // unset: the Service's own port
			}
			switch n := resolvePort(target, slices.Concat([]*corev1.Container{p.sidecar}, p.apps)...); {
			case n == webhooks:
				reached = true
			case n == admin && sp.Name == "metrics":
			default:
				t.Errorf("%s: Service %s port %q targets %s, not the sidecar's port %d: webhooks would bypass deduplication",
					p.name, svc.Name, sp.Name, target.String(), webhooks)
			}
		}
	}
	if !reached {
		t.Errorf("%s: no Service targets the sidecar's port %d", p.name, webhooks)
	}
}

func (p *pod) checkNetworkPolicies(t *testing.T) {
	t.Helper()
	webhooks, admin := p.containerPort("webhooks"), p.containerPort("admin")
	isolated, admitted := false, false
	for _, np := range p.m.networkPolicies {
		if !selectorMatches(t, &np.Spec.PodSelector, p.labels) || !hasIngress(np) {
			continue
		}
		isolated = true
		for i, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 {
				t.Errorf("%s: NetworkPolicy %s rule %d admits every port", p.name, np.Name, i)
			}
			for _, port := range rule.Ports {
				if port.Port == nil || port.EndPort != nil || (port.Protocol != nil && *port.Protocol != corev1.ProtocolTCP) {
					t.Errorf("%s: NetworkPolicy %s rule %d admits a port range or protocol beyond one TCP port", p.name, np.Name, i)
					continue
				}
				switch n := resolvePort(*port.Port, slices.Concat([]*corev1.Container{p.sidecar}, p.apps)...); {
				case n == webhooks:
					admitted = true
				case n == admin && restricted(rule.From):
				case n == admin:
					t.Errorf("%s: NetworkPolicy %s opens the admin port %d to everyone", p.name, np.Name, admin)
				default:
					t.Errorf("%s: NetworkPolicy %s admits port %s, which is not the sidecar's webhook port %d", p.name, np.Name, port.Port.String(), webhooks)
				}
			}
		}
	}
	if !isolated {
		t.Errorf("%s: no NetworkPolicy isolates the pod's ingress", p.name)
	}
	if !admitted {
		t.Errorf("%s: no NetworkPolicy admits the sidecar's port %d", p.name, webhooks)
	}
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

// checkAppOnLoopback: the app listens on 127.0.0.1 at the port UPSTREAM_URL
// names, publishes no port, and is probed through the sidecar.
func (p *pod) checkAppOnLoopback(t *testing.T) {
	t.Helper()
	upstream, err := url.Parse(p.setting("UPSTREAM_URL"))
	if err != nil || upstream.Hostname() != "127.0.0.1" || upstream.Port() == "" {
		t.Errorf("%s: UPSTREAM_URL=%q, want http://127.0.0.1:PORT", p.name, p.setting("UPSTREAM_URL"))
		return
	}
	port := upstream.Port()
	if len(p.apps) == 0 {
		t.Errorf("%s: no app container beside the sidecar", p.name)
	}
	for _, app := range p.apps {
		host, bound := false, false
		for _, e := range app.Env {
			h, pt, err := net.SplitHostPort(e.Value)
			switch {
			case e.ValueFrom != nil:
			case err == nil && h == "127.0.0.1" && pt == port:
				bound = true
			case err == nil && pt == port:
				t.Errorf("%s: app %s's %s=%s binds port %s beyond loopback", p.name, app.Name, e.Name, e.Value, port)
			case e.Value == "127.0.0.1":
				host = true
			case e.Value == "0.0.0.0" || e.Value == "::":
				t.Errorf("%s: app %s's %s=%s binds every interface", p.name, app.Name, e.Name, e.Value)
			}
		}
		portSet := slices.ContainsFunc(app.Env, func(e corev1.EnvVar) bool { return e.ValueFrom == nil && e.Value == port })
		if !bound && !(host && portSet) {
			t.Errorf("%s: app %s's env does not bind 127.0.0.1:%s (UPSTREAM_URL's port)", p.name, app.Name, port)
		}
		if len(app.Ports) > 0 {
			t.Errorf("%s: app %s publishes ports %v; only the sidecar's port may be reachable", p.name, app.Name, app.Ports)
		}
		for _, probe := range []*corev1.Probe{app.LivenessProbe, app.ReadinessProbe, app.StartupProbe} {
			if probe == nil {
				continue
			}
			var target intstr.IntOrString
			switch {
			case probe.HTTPGet != nil:
				target = probe.HTTPGet.Port
			case probe.TCPSocket != nil:
				target = probe.TCPSocket.Port
			default:
				continue
			}
			if n := resolvePort(target, p.sidecar); n != p.containerPort("webhooks") {
				t.Errorf("%s: app %s is probed on port %s; the kubelet cannot reach loopback, probe through the sidecar's port %d",
					p.name, app.Name, target.String(), p.containerPort("webhooks"))
			}
		}
	}
}

// checkShutdown: the grace period covers every preStop sleep, then the
// sidecar's SHUTDOWN_DELAY and SHUTDOWN_TIMEOUT (a native sidecar stops
// only after the app has exited, so the sum is what it may need).
func (p *pod) checkShutdown(t *testing.T) {
	t.Helper()
	var need time.Duration
	for _, name := range []string{"SHUTDOWN_DELAY", "SHUTDOWN_TIMEOUT"} {
		d, err := time.ParseDuration(p.setting(name))
		if err != nil {
			t.Errorf("%s: %s=%q: %v", p.name, name, p.setting(name), err)
		}
		need += d
	}
	if d, _ := time.ParseDuration(p.setting("SHUTDOWN_DELAY")); d <= 0 {
		t.Errorf("%s: SHUTDOWN_DELAY is 0: webhooks that arrive while the endpoint is being removed would be refused", p.name)
	}
	for _, c := range slices.Concat(p.spec.InitContainers, p.spec.Containers) {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			continue
		}
		switch pre := c.Lifecycle.PreStop; {
		case pre.Sleep != nil:
			need += time.Duration(pre.Sleep.Seconds) * time.Second
		case c.Name == sidecarName:
			t.Errorf("%s: %s has a preStop hook other than sleep; the image has no shell, and SHUTDOWN_DELAY does the waiting", p.name, sidecarName)
		}
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if p.spec.TerminationGracePeriodSeconds != nil {
		grace = *p.spec.TerminationGracePeriodSeconds
	}
	if time.Duration(grace)*time.Second < need {
		t.Errorf("%s: terminationGracePeriodSeconds %d < %v (preStop sleeps + SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT): draining would be cut short by SIGKILL",
			p.name, grace, need)
	}
}

func (p *pod) checkResources(t *testing.T) {
	t.Helper()
	r := p.sidecar.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := r.Requests[name]; !ok {
			t.Errorf("%s: %s has no %s request", p.name, sidecarName, name)
		}
	}
	limit, ok := r.Limits[corev1.ResourceMemory]
	if !ok {
		t.Errorf("%s: %s has no memory limit", p.name, sidecarName)
		return
	}
	if req := r.Requests[corev1.ResourceMemory]; limit.Cmp(req) < 0 {
		t.Errorf("%s: %s's memory limit %s is below its request %s", p.name, sidecarName, limit.String(), req.String())
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

// checkRedis: the in-cluster Redis persists every write, requires the
// password the sidecars use, listens where REDIS_URL points, and admits only
// the sidecars' pods.
func checkRedis(t *testing.T, m *manifests, sts *appsv1.StatefulSet, pods []*pod) {
	t.Helper()
	where := "StatefulSet " + sts.Name
	spec := &sts.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want redis alone", where, len(spec.Containers))
	}
	redis := &spec.Containers[0]
	checkHardened(t, where, spec, redis)
	checkReferences(t, m, where, spec)
	checkExpansions(t, m, where, spec)
	checkImages(t, where, spec)

	args := slices.Concat(redis.Command, redis.Args)
	flag := func(name string) string {
		if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	if flag("--appendonly") != "yes" {
		t.Errorf("%s: redis runs without --appendonly yes: a restart would forget claims and completed events", where)
	}
	if flag("--maxmemory-policy") != "" && flag("--maxmemory-policy") != "noeviction" {
		t.Errorf("%s: --maxmemory-policy %s evicts records, letting duplicates through", where, flag("--maxmemory-policy"))
	}
	dir := flag("--dir")
	if dir == "" {
		dir = "/data"
	}
	mounted := slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(pvc corev1.PersistentVolumeClaim) bool {
		return slices.ContainsFunc(redis.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == pvc.Name && vm.MountPath == dir })
	})
	if !mounted {
		t.Errorf("%s: no PersistentVolumeClaim template is mounted at redis's dir %s", where, dir)
	}

	password := strings.TrimSuffix(strings.TrimPrefix(flag("--requirepass"), "$("), ")")
	i := slices.IndexFunc(redis.Env, func(e corev1.EnvVar) bool { return e.Name == password })
	if password == "" || i < 0 || redis.Env[i].ValueFrom == nil || redis.Env[i].ValueFrom.SecretKeyRef == nil {
		t.Fatalf("%s: --requirepass is not $(VAR) with VAR read from a Secret", where)
	}
	secretRef := redis.Env[i].ValueFrom.SecretKeyRef

	var headless bool
	var address []string
	for _, svc := range m.services {
		if !selects(svc.Spec.Selector, sts.Spec.Template.Labels) {
			continue
		}
		if svc.Name == sts.Spec.ServiceName && svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = true
		}
		for _, sp := range svc.Spec.Ports {
			if resolvePort(sp.TargetPort, redis) == 6379 {
				address = append(address, net.JoinHostPort(svc.Name, fmt.Sprint(sp.Port)))
			}
		}
	}
	if !headless {
		t.Errorf("%s: serviceName %q is not a rendered headless Service selecting its pods", where, sts.Spec.ServiceName)
	}
	for _, p := range pods {
		u, err := url.Parse(p.setting("REDIS_URL"))
		if err != nil || !slices.Contains(address, u.Host) {
			t.Errorf("%s: REDIS_URL=%q, want one of the Redis Services %v", p.name, p.setting("REDIS_URL"), address)
		}
		// The password is $(VAR) in REDIS_URL, or else REDIS_PASSWORD if
		// the binary reads it; either way VAR must hold Redis's password.
		pw := ""
		if u != nil && u.User != nil {
			pw, _ = u.User.Password()
		}
		name := "REDIS_PASSWORD"
		if ref := expansion.FindStringSubmatch(pw); ref != nil {
			name = ref[1]
		} else if _, ok := p.defaults[name]; !ok {
			t.Errorf("%s: REDIS_URL carries no $(VAR) password, and the binary reads no REDIS_PASSWORD", p.name)
			continue
		}
		i := slices.IndexFunc(p.sidecar.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || p.sidecar.Env[i].ValueFrom == nil || p.sidecar.Env[i].ValueFrom.SecretKeyRef == nil ||
			*p.sidecar.Env[i].ValueFrom.SecretKeyRef != *secretRef {
			t.Errorf("%s: %s does not come from Secret %s key %s, which Redis requires", p.name, name, secretRef.Name, secretRef.Key)
		}
	}

	isolated := false
	for _, np := range m.networkPolicies {
		if !selectorMatches(t, &np.Spec.PodSelector, sts.Spec.Template.Labels) || !hasIngress(np) {
			continue
		}
		isolated = true
		for i, rule := range np.Spec.Ingress {
			for _, port := range rule.Ports {
				if port.Port == nil || resolvePort(*port.Port, redis) != 6379 || port.EndPort != nil {
					t.Errorf("%s: NetworkPolicy %s rule %d admits more than the Redis port", where, np.Name, i)
				}
			}
			if len(rule.Ports) == 0 || len(rule.From) == 0 {
				t.Errorf("%s: NetworkPolicy %s rule %d admits every port or every peer", where, np.Name, i)
			}
			for _, peer := range rule.From {
				if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
					t.Errorf("%s: NetworkPolicy %s rule %d admits peers beyond this namespace's pods", where, np.Name, i)
					continue
				}
				for _, p := range pods {
					if !selectorMatches(t, peer.PodSelector, p.labels) {
						t.Errorf("%s: NetworkPolicy %s does not admit %s's pods", where, np.Name, p.name)
					}
				}
			}
		}
	}
	if !isolated {
		t.Errorf("%s: no NetworkPolicy isolates Redis", where)
	}
}

func checkServiceMonitor(t *testing.T, m *manifests, sm *serviceMonitor, pods []*pod) {
	t.Helper()
	where := "ServiceMonitor " + sm.Name
	var targets []*corev1.Service
	for _, svc := range m.services {
		if selectorMatches(t, &sm.Spec.Selector, svc.Labels) {
			targets = append(targets, svc)
		}
	}
	if len(targets) == 0 || len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("%s: selects no rendered Service, or has no endpoints", where)
	}
	for _, svc := range targets {
		for _, ep := range sm.Spec.Endpoints {
			if ep.Path != "" && ep.Path != "/metrics" {
				t.Errorf("%s: scrapes %s, want /metrics", where, ep.Path)
			}
			i := slices.IndexFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == ep.Port })
			if i < 0 {
				t.Errorf("%s: Service %s has no port named %q", where, svc.Name, ep.Port)
				continue
			}
			for _, p := range pods {
				if !selects(svc.Spec.Selector, p.labels) {
					t.Errorf("%s: Service %s does not select %s's pods", where, svc.Name, p.name)
				} else if resolvePort(svc.Spec.Ports[i].TargetPort, p.sidecar) != p.containerPort("admin") {
					t.Errorf("%s: Service %s port %s does not target %s's admin port", where, svc.Name, ep.Port, p.name)
				}
			}
		}
	}
}

// TestSidecarIsTheSameEverywhere: the sidecar is spelt out in the base and in
// the existing-app patch; everything but its configuration references must
// agree, so a fix in one place is not forgotten in the other.
func TestSidecarIsTheSameEverywhere(t *testing.T) {
	type field struct {
		name string
		get  func(c *corev1.Container) any
	}
	fields := []field{
		{"image", func(c *corev1.Container) any { return c.Image }},
		{"ports", func(c *corev1.Container) any { return c.Ports }},
		{"startupProbe", func(c *corev1.Container) any { return c.StartupProbe }},
		{"livenessProbe", func(c *corev1.Container) any { return c.LivenessProbe }},
		{"readinessProbe", func(c *corev1.Container) any { return c.ReadinessProbe }},
		{"resources", func(c *corev1.Container) any { return c.Resources }},
		{"securityContext", func(c *corev1.Container) any { return c.SecurityContext }},
		{"lifecycle", func(c *corev1.Container) any { return c.Lifecycle }},
		{"args", func(c *corev1.Container) any { return c.Args }},
	}
	sidecars := map[string]*corev1.Container{}
	for _, v := range variants {
		m := render(t, v.dir)
		for _, d := range m.deployments {
			for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
				if c.Name == sidecarName {
					sidecars[v.dir+" Deployment "+d.Name] = &c
				}
			}
		}
	}
	ref, ok := sidecars["base Deployment webhook-app"]
	if !ok {
		t.Fatal("no sidecar in base Deployment webhook-app")
	}
	for where, c := range sidecars {
		for _, f := range fields {
			want, _ := json.Marshal(f.get(ref))
			got, _ := json.Marshal(f.get(c))
			if string(got) != string(want) {
				t.Errorf("%s: sidecar %s differs from the base's:\n got %s\nwant %s", where, f.name, got, want)
			}
		}
	}
}
