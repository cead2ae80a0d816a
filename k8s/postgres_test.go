package k8s

import (
	"net/url"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// checkPostgres: a pod whose sidecar keeps its records in PostgreSQL takes
// DATABASE_URL (which holds the password) from a Secret, never a
// ConfigMap; nothing configures Redis beside it (two stores at once stop
// the process at start); and its egress, restricted, still reaches the
// database's port and DNS.
func checkPostgres(t *testing.T, m *manifests, p *pod) {
	t.Helper()
	dbURL := p.setting("DATABASE_URL")
	if dbURL == "" {
		return
	}
	for name, cm := range m.configMaps {
		if _, ok := cm.Data["DATABASE_URL"]; ok {
			t.Errorf("%s: ConfigMap %s holds DATABASE_URL: its password belongs in a Secret", p.name, name)
		}
	}
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_ADDRS", "REDIS_SENTINEL_ADDRS", "DYNAMODB_TABLE", "DATA_DIR"} {
		if p.setting(v) != "" {
			t.Errorf("%s: DATABASE_URL and %s=%q: two stores", p.name, v, p.setting(v))
		}
	}
	if len(m.statefulSets) > 0 {
		t.Errorf("%s: DATABASE_URL is set, yet %d StatefulSets (a Redis?) are rendered beside it", p.name, len(m.statefulSets))
	}
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Hostname() == "" {
		t.Fatalf("%s: DATABASE_URL is not a postgres:// URL with a host", p.name)
	}
	port := 5432
	if u.Port() != "" {
		port, _ = strconv.Atoi(u.Port())
	}
	if u.Query().Get("sslmode") != "verify-full" {
		t.Errorf("%s: DATABASE_URL without sslmode=verify-full: the password would cross the network unchecked", p.name)
	}
	restricting := 0
	database, dns := false, false
	for _, np := range m.networkPolicies {
		if !selectorMatches(t, &np.Spec.PodSelector, p.labels) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		restricting++
		for i, rule := range np.Spec.Egress {
			if len(rule.To) == 0 || len(rule.Ports) == 0 {
				t.Errorf("%s: NetworkPolicy %s egress rule %d allows every peer or every port", p.name, np.Name, i)
			}
			for _, pp := range rule.Ports {
				proto := corev1.ProtocolTCP
				if pp.Protocol != nil {
					proto = *pp.Protocol
				}
				switch {
				case pp.Port == nil:
				case proto == corev1.ProtocolTCP && pp.Port.IntValue() == port:
					database = true
				case proto == corev1.ProtocolUDP && pp.Port.IntValue() == 53:
					dns = true
				}
			}
		}
	}
	if restricting == 0 {
		t.Errorf("%s: no NetworkPolicy limits the pod's egress to the database", p.name)
		return
	}
	if !database {
		t.Errorf("%s: its egress is restricted, but no rule reaches the database's port %d", p.name, port)
	}
	if !dns {
		t.Errorf("%s: its egress is restricted, but no rule reaches DNS (UDP 53): the database's name would not resolve", p.name)
	}
}
