package k8s

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// sidecarName is the container name webhook-dedup runs under in every
// manifest.
const sidecarName = "webhook-dedup"

// goRuntimeVariables are read by the Go runtime in the binary rather than by
// its configuration, so -h does not list them.
var goRuntimeVariables = map[string]bool{"GOMEMLIMIT": true, "GOGC": true, "GOMAXPROCS": true, "GODEBUG": true}

// awsSDKVariables are read by the AWS SDK in the binary (with
// DYNAMODB_TABLE) rather than by its configuration, so -h does not list
// them either.
var awsSDKVariables = map[string]bool{"AWS_REGION": true, "AWS_ENDPOINT_URL_DYNAMODB": true}

// TestSidecarInvariants checks, in every variant, what keeps webhooks from
// bypassing deduplication and the pod from losing them on the way down.
func TestSidecarInvariants(t *testing.T) {
	binary := builtBinary(t).binary
	known := binaryVariables(t, binary)
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
				p.checkAppOnLoopback(t)
				checkPod(t, m, d, p, binary, v.onboarding)
				checkPostgres(t, m, p)
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

// checkPod runs the checks every pod carrying webhook-dedup passes,
// whether kustomize or the chart rendered it and wherever the container
// sits. onboarding: the variant is the one named for a roll-out's first
// days, which may fail open.
func checkPod(t *testing.T, m *manifests, d *appsv1.Deployment, p *pod, binary string, onboarding bool) {
	t.Helper()
	p.checkEnvNames(t, p.defaults)
	p.checkAppName(t, d.Spec.Selector)
	p.checkPorts(t)
	p.checkProbes(t)
	p.checkServices(t)
	p.checkNetworkPolicies(t)
	p.checkShutdown(t)
	p.checkResources(t)
	p.checkSecretsRequired(t, signingSecrets(t, binary))
	p.checkFailsClosed(t, onboarding)
	checkHardened(t, p.name, p.spec, p.sidecar)
	checkReferences(t, m, p.name, p.spec)
	checkExpansions(t, m, p.name, p.spec)
	checkImages(t, p.name, p.spec)
	checkDisruptionBudget(t, m, p.name, p.labels, d.Spec.Replicas)
	checkDelivery(t, m, d, p)
	checkOneStore(t, p)
	checkDynamoDB(t, m, p)
	checkStarts(t, binary, p)
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
		if _, ok := known[name]; !ok && !goRuntimeVariables[name] && !awsSDKVariables[name] && !slices.Contains(expanded, name) {
			t.Errorf("%s: %s is set for %s, but `webhook-dedup -h` does not list it", p.name, name, sidecarName)
		}
	}
}

// checkAppName: APP_NAME is the pod's namespace and one of the
// Deployment's selector labels, read with the downward API: two apps (two
// Deployments, or one name in two namespaces) never share a KEY_PREFIX by
// accident, and every replica of one Deployment carries the same name.
func (p *pod) checkAppName(t *testing.T, selector *metav1.LabelSelector) {
	t.Helper()
	byName := func(name string) *corev1.EnvVar {
		i := slices.IndexFunc(p.sidecar.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 {
			return nil
		}
		return &p.sidecar.Env[i]
	}
	appName := byName("APP_NAME")
	if appName == nil || appName.ValueFrom != nil {
		t.Errorf("%s: APP_NAME is not set from the pod's namespace and labels", p.name)
		return
	}
	namespace, label := false, false
	for _, ref := range expansion.FindAllStringSubmatch(appName.Value, -1) {
		e := byName(ref[1])
		if e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			continue
		}
		path := e.ValueFrom.FieldRef.FieldPath
		namespace = namespace || path == "metadata.namespace"
		if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
			k = strings.TrimSuffix(k, "']")
			label = label || (selector != nil && selector.MatchLabels[k] != "" && p.labels[k] == selector.MatchLabels[k])
		}
	}
	if !namespace || !label {
		t.Errorf("%s: APP_NAME=%q: want $(VAR)s read with fieldRef from metadata.namespace (%v) and a label of the Deployment's selector (%v)", p.name, appName.Value, namespace, label)
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
// only after the app has exited, so the sum is what it may need); the
// drain lasts as long as one forwarded request may.
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
	drain, _ := time.ParseDuration(p.setting("SHUTDOWN_TIMEOUT"))
	if upstream, err := time.ParseDuration(p.setting("UPSTREAM_TIMEOUT")); err != nil || drain < upstream {
		t.Errorf("%s: SHUTDOWN_TIMEOUT %s < UPSTREAM_TIMEOUT %q: a request still at the app when the drain ends is abandoned, and the app does its work twice",
			p.name, drain, p.setting("UPSTREAM_TIMEOUT"))
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

// checkSecretsRequired: each route on a preset that signs reads its
// signing secret from a Secret, required: a pod whose Secret or key is
// missing waits (CreateContainerConfigError) instead of starting a proxy
// that verifies nothing. signing maps each preset to its variable.
func (p *pod) checkSecretsRequired(t *testing.T, signing map[string]string) {
	t.Helper()
	for _, route := range strings.Split(p.setting("ROUTES"), ",") {
		_, source, _ := strings.Cut(route, "=")
		source, _, _ = strings.Cut(source, ";")
		if source == "svix" {
			source = "standardwebhooks" // the alias
		}
		name, signs := signing[source]
		if !signs {
			continue
		}
		i := slices.IndexFunc(p.sidecar.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		switch {
		case i < 0:
			t.Errorf("%s: route %s uses %s, but %s is not read from a Secret: the route would verify nothing", p.name, route, source, name)
		case p.sidecar.Env[i].ValueFrom == nil || p.sidecar.Env[i].ValueFrom.SecretKeyRef == nil:
			t.Errorf("%s: %s is not read from a Secret", p.name, name)
		case p.sidecar.Env[i].ValueFrom.SecretKeyRef.Optional == nil || *p.sidecar.Env[i].ValueFrom.SecretKeyRef.Optional:
			t.Errorf("%s: %s's secretKeyRef is not optional: false: without its Secret the pod would start unverified", p.name, name)
		}
	}
}

// checkFailsClosed: as shipped, webhook-dedup deduplicates and refuses
// what it cannot check; shadow mode and forwarding on store errors belong
// to the variant named for onboarding.
func (p *pod) checkFailsClosed(t *testing.T, onboarding bool) {
	t.Helper()
	if onboarding {
		return
	}
	if p.setting("SHADOW_MODE") != "false" {
		t.Errorf("%s: SHADOW_MODE=%s: as shipped it would deduplicate nothing; shadow mode belongs in the onboarding variant", p.name, p.setting("SHADOW_MODE"))
	}
	if p.setting("ON_STORE_ERROR") != "reject" {
		t.Errorf("%s: ON_STORE_ERROR=%s: as shipped it would let duplicates through while the store is down; that belongs in the onboarding variant", p.name, p.setting("ON_STORE_ERROR"))
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
