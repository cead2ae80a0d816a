package config

import (
	"regexp"
	"strings"
)

// dynamoDBTableName is DynamoDB's rule for a table's name.
var dynamoDBTableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// dynamoDBReplayMax is the largest REPLAY_MAX_BYTES with DynamoDB: an item
// holds at most 400 KB, and the key, content type and attributes need
// room beside the kept body.
const dynamoDBReplayMax = 380000

// completeDynamoDB validates DYNAMODB_TABLE and what it constrains.
func (c *Config) completeDynamoDB(bad func(name, format string, args ...any)) {
	if c.DynamoDBTable == "" {
		return
	}
	// An ARN names a table in another account (resource-based policy).
	if !dynamoDBTableName.MatchString(c.DynamoDBTable) && !strings.HasPrefix(c.DynamoDBTable, "arn:") {
		bad("DYNAMODB_TABLE", "%q is not a table name (3 to 255 of a-z, A-Z, 0-9, '_', '-', '.') or a table's ARN", c.DynamoDBTable)
	}
	if c.ReplayMaxBytes > dynamoDBReplayMax {
		bad("REPLAY_MAX_BYTES", "%d is more than DynamoDB's items hold with DYNAMODB_TABLE: at most %d", c.ReplayMaxBytes, dynamoDBReplayMax)
	}
}
