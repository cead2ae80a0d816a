package k8s

import (
	"strings"
	"testing"
)

// checkDynamoDB: a pod whose sidecar keeps its records in DynamoDB runs as
// a rendered ServiceAccount carrying an IRSA role, and nothing configures
// Redis beside it (two stores at once stop the process at start). A pod
// that names a ServiceAccount finds it rendered, whatever its store.
func checkDynamoDB(t *testing.T, m *manifests, p *pod) {
	t.Helper()
	name := p.spec.ServiceAccountName
	sa, rendered := m.serviceAccounts[name]
	if name != "" && !rendered {
		t.Errorf("%s: runs as ServiceAccount %q, which is not rendered", p.name, name)
	}
	table := p.setting("DYNAMODB_TABLE")
	if table == "" {
		return
	}
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_ADDRS", "REDIS_SENTINEL_ADDRS"} {
		if p.setting(v) != "" {
			t.Errorf("%s: DYNAMODB_TABLE=%s and %s=%q: two stores", p.name, table, v, p.setting(v))
		}
	}
	if len(m.statefulSets) > 0 {
		t.Errorf("%s: DYNAMODB_TABLE is set, yet %d StatefulSets (a Redis?) are rendered beside it", p.name, len(m.statefulSets))
	}
	if p.setting("AWS_REGION") == "" {
		t.Errorf("%s: DYNAMODB_TABLE without AWS_REGION: the SDK would have no region unless a webhook injects one", p.name)
	}
	if !rendered {
		t.Fatalf("%s: DYNAMODB_TABLE is set, but the pod runs as no rendered ServiceAccount (serviceAccountName %q): it would have no AWS credentials", p.name, name)
	}
	if arn := sa.Annotations["eks.amazonaws.com/role-arn"]; !strings.HasPrefix(arn, "arn:aws:iam::") || !strings.Contains(arn, ":role/") {
		t.Errorf("%s: ServiceAccount %s has eks.amazonaws.com/role-arn %q, want an IAM role's ARN (IRSA)", p.name, name, arn)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("%s: ServiceAccount %s mounts the Kubernetes API token; IRSA needs only its own projected token", p.name, name)
	}
}
