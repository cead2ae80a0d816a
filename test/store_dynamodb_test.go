package test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/dynamotest"
)

// dynamoDBEnv is the configuration of a proxy on table in srv: the table
// and the AWS SDK's environment pointing at dynalite.
func dynamoDBEnv(srv *dynamotest.Server, table string) map[string]string {
	env := map[string]string{"DYNAMODB_TABLE": table}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// migrateTable runs `webhook-dedup migrate` with env, as an init container
// would.
func migrateTable(t *testing.T, env map[string]string) string {
	t.Helper()
	cmd := exec.Command(binary, "migrate")
	cmd.Env = envList(env)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("webhook-dedup migrate: %v\n%s", err, out)
	}
	return string(out)
}

// dynaliteConcurrent is how many events the exactly-once run keeps in
// flight on dynalite. dynalite is one Node.js thread doing a millisecond or
// more per request; at the other runs' 24 events (some 60 requests, each
// two or three store calls) its queue alone outlasts STORE_TIMEOUT on a
// loaded two-core machine with the race detector on, and the run measures
// dynalite's overload instead of the store's correctness.
const dynaliteConcurrent = 6

// TestExactlyOnceDynamoDB is the exactly-once run on DynamoDB (dynalite).
func TestExactlyOnceDynamoDB(t *testing.T) {
	t.Parallel()
	env := dynamoDBEnv(dynamotest.New(t), "webhook-dedup")
	migrateTable(t, env)
	exactlyOnceRun(t, "dynamodb", env, dynaliteConcurrent)
}

// A missing table is logged at error level, naming it, and /readyz answers
// 503 until `webhook-dedup migrate` creates it.
func TestDynamoDBMissingTable(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	env := dynamoDBEnv(dynamotest.New(t), "created-later")
	px := startProxy(t, proxyEnv(app, env))
	if err := px.pollAdmin("/readyz", 503, storeStateDeadline); err != nil {
		t.Fatalf("readyz without the table: %v", err)
	}
	if out := migrateTable(t, env); !strings.Contains(out, "table created-later: created") {
		t.Errorf("migrate printed %q, want the table created", out)
	}
	if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
		t.Fatalf("readyz once the table exists: %v", err)
	}
	px.Stop() // the logs are complete once it has exited
	logged := false
	for _, line := range strings.Split(px.Logs(), "\n") {
		logged = logged || strings.Contains(line, `"level":"error"`) && strings.Contains(line, "created-later")
	}
	if !logged {
		t.Errorf("no error-level log line names the missing table; logs:\n%s", px.Logs())
	}
}
