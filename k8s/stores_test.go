package k8s

import (
	"slices"
	"strings"
	"testing"
)

// storeVariables are the variables that each choose a store (the config
// package's chooseStore): setting two stops the sidecar at start
// ("configure exactly one store").
var storeVariables = []string{"REDIS_URL", "REDIS_CLUSTER_ADDRS", "REDIS_SENTINEL_ADDRS", "DYNAMODB_TABLE", "DATA_DIR", "DATABASE_URL"}

// checkOneStore: the sidecar is configured with one store at most, once
// every layer is merged (an overlay's own store beside the base Secret's
// REDIS_URL made a crash loop). A variable set from a Secret or field the
// manifests do not hold counts as set; one set empty does not.
func checkOneStore(t *testing.T, p *pod) {
	t.Helper()
	var set []string
	for _, v := range storeVariables {
		if !slices.Contains(p.names, v) {
			continue
		}
		if value, fixed := p.env[v]; !fixed || value != "" {
			set = append(set, v)
		}
	}
	if len(set) > 1 {
		t.Errorf("%s: the sidecar is given %s: configure exactly one store, or it refuses to start", p.name, strings.Join(set, " and "))
	}
}
