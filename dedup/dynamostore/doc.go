// Package dynamostore keeps the records in a DynamoDB table, one item per
// key, shared by every replica.
//
// Each operation is one conditional write or one strongly consistent read
// of one item, so it is atomic, and durable as DynamoDB's writes are.
// Expiry is judged on this process's clock from each item's expiry in
// milliseconds, since DynamoDB's TTL deletes an item only eventually.
//
// It keeps no async delivery queue: routes using it are sync only. The
// table is created by `webhook-dedup migrate`, never at start.
package dynamostore
