package dynamostore

import "github.com/webhook-dedup/webhook-dedup/dedup/dynamostore/dynamoconf"

// FromSettings is the Config the environment's settings describe. Timeout,
// not DynamoDB's own setting (STORE_TIMEOUT), is left to the caller.
func FromSettings(s dynamoconf.Settings) Config { return Config{Table: s.Table} }
