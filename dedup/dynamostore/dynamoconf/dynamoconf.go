// Package dynamoconf is the DynamoDB store's settings: its environment
// variable (DYNAMODB_TABLE), its help, and its validation. It is apart
// from dynamostore, and links no AWS SDK, so that the configuration can
// read and check it without linking the store's. Region, credentials and
// endpoint are the AWS SDK's own variables, read by dynamostore.Open.
package dynamoconf

import (
	"regexp"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

// Settings are the DynamoDB store's environment variables. The desc tag
// is what -h and docs/configuration.md say about each.
type Settings struct {
	Table string `env:"DYNAMODB_TABLE" desc:"Amazon DynamoDB table of the records (string partition key pk, TTL attribute expires_at; webhook-dedup migrate creates it), instead of REDIS_URL; region, credentials and endpoint from the AWS SDK's environment (AWS_REGION, AWS_ENDPOINT_URL_DYNAMODB, …); sync delivery only"`
}

// tableName is DynamoDB's rule for a table's name.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// ReplayMax is the largest REPLAY_MAX_BYTES with DynamoDB: an item holds
// at most 400 KB, and the key, content type and attributes need room
// beside the kept body.
const ReplayMax = 380000

// Choices is the variable that chooses the store: DYNAMODB_TABLE.
func (s *Settings) Choices() []setting.Choice {
	return []setting.Choice{{Variable: "DYNAMODB_TABLE", Set: s.Table != ""}}
}

// Complete validates DYNAMODB_TABLE and what it constrains of the rest
// of the configuration (REPLAY_MAX_BYTES).
func (s *Settings) Complete(scope setting.Scope) setting.Problems {
	var bad setting.Problems
	if s.Table == "" {
		return bad
	}
	// An ARN names a table in another account (resource-based policy).
	if !tableName.MatchString(s.Table) && !strings.HasPrefix(s.Table, "arn:") {
		bad.Add("DYNAMODB_TABLE", "%q is not a table name (3 to 255 of a-z, A-Z, 0-9, '_', '-', '.') or a table's ARN", s.Table)
	}
	if scope.ReplayMaxBytes > ReplayMax {
		bad.Add("REPLAY_MAX_BYTES", "%d is more than DynamoDB's items hold with DYNAMODB_TABLE: at most %d", scope.ReplayMaxBytes, ReplayMax)
	}
	return bad
}
