package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/dynamotest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// migrate creates the DynamoDB table, then finds it; dynalite's missing
// UpdateTimeToLive is a warning, not a failure. inspect and forget then
// work against the table.
func TestMigrateDynamoDB(t *testing.T) {
	srv := dynamotest.New(t)
	srv.Setenv(t) // the AWS SDK reads the process's environment
	env := map[string]string{"DYNAMODB_TABLE": "cli-test"}
	migrate := func() (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"migrate"}, env, &out, &errOut); err != nil {
			t.Fatalf("migrate: %v\n%s", err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	out, warn := migrate()
	if !strings.Contains(out, "table cli-test: created") || !strings.Contains(warn, "warning:") || !strings.Contains(warn, "UpdateTimeToLive") {
		t.Errorf("first migrate printed %q and %q; want the table created and a warning about UpdateTimeToLive", out, warn)
	}
	if out, _ := migrate(); !strings.Contains(out, "table cli-test: exists") {
		t.Errorf("second migrate printed %q; want the table found", out)
	}
	if _, err := runCommand(env, "forget", "stripe", "evt_1"); exitCode(err) != 1 || !strings.Contains(err.Error(), "no record") {
		t.Errorf("forget of an unknown event in DynamoDB: %v; want exit 1 saying there is no record", err)
	}
}

func TestMigrateNeedsATableStore(t *testing.T) {
	for _, env := range []map[string]string{nil, {"REDIS_URL": "redis://" + redistest.FreeAddr(t)}} {
		_, err := runCommand(env, "migrate")
		if exitCode(err) != 2 || !strings.Contains(err.Error(), "DYNAMODB_TABLE") {
			t.Errorf("migrate with %v: %v; want exit status 2 naming DYNAMODB_TABLE", env, err)
		}
	}
}
