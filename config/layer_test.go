package config

import (
	"os/exec"
	"strings"
	"testing"
)

// TestConfigIsTheBottomLayer: config links neither the request path
// (proxy, upstream, delivery, admin) nor a store's driver: the stores'
// settings it composes live in driver-free packages (redisconf, pgconf,
// dynamoconf, diskconf), and the policies it parses in policy.
func TestConfigIsTheBottomLayer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const mod = "github.com/webhook-dedup/webhook-dedup/"
	forbidden := []string{
		mod + "proxy", mod + "upstream", mod + "delivery", mod + "admin", mod + "internal/stores",
		mod + "dedup/redisstore", mod + "dedup/pgstore", mod + "dedup/dynamostore", mod + "dedup/diskstore", mod + "dedup/memstore",
		"github.com/redis/go-redis", "github.com/jackc/pgx", "go.etcd.io/bbolt", "github.com/aws/aws-sdk-go-v2",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") && !strings.HasSuffix(dep, "conf") && !strings.HasSuffix(dep, "/pgname") {
				t.Errorf("config links %s", dep)
			}
		}
	}
}
