package k8s

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

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
	if flag("--maxmemory-policy") != "noeviction" {
		t.Errorf("%s: --maxmemory-policy %q, want noeviction written out: an evicting policy drops records (letting duplicates through) and queued events (losing webhooks answered 202)", where, flag("--maxmemory-policy"))
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
		i := slices.IndexFunc(p.sidecar.Env, func(e corev1.EnvVar) bool {
			ref := e.ValueFrom
			return e.Name == name && ref != nil && ref.SecretKeyRef != nil &&
				ref.SecretKeyRef.Name == secretRef.Name && ref.SecretKeyRef.Key == secretRef.Key
		})
		if i < 0 {
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
