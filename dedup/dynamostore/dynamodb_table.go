package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// TableClient is what MigrateDynamoDB needs of the SDK's
// *dynamodb.Client.
type TableClient interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// ErrTableKey means an existing table's key is not the string partition
// key pk alone: this store cannot use it.
var ErrTableKey = errors.New("dedup: the DynamoDB table's key is not the string partition key " + attrKey)

// Migration is what MigrateDynamoDB did.
type Migration struct {
	// Created is true when the table was created, false when it existed.
	Created bool
	// TTLEnabled is true when the table's TTL is on (or being turned on)
	// for expires_at.
	TTLEnabled bool
	// Warning, when not nil, says why TTL is not on although the table is
	// usable: a backend without UpdateTimeToLive (dynalite). Expired
	// records are then ignored but never deleted.
	Warning error
}

// tableActiveWait bounds the wait for a new table to become active.
const tableActiveWait = 5 * time.Minute

// Migrate creates table when it is missing (string partition key
// pk, on-demand capacity), waits until it is active, and turns its TTL on
// for expires_at. Run again, it changes nothing. An existing table with
// another key is ErrTableKey.
func Migrate(ctx context.Context, c TableClient, table string) (Migration, error) {
	var m Migration
	desc, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		_, err = c.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            aws.String(table),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
			BillingMode:          types.BillingModePayPerRequest,
		})
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // in use: created meanwhile
			return m, fmt.Errorf("dedup: create table %s: %w", table, err)
		}
		m.Created = err == nil
		waiter := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
			o.MinDelay, o.MaxDelay = time.Second, 5*time.Second
		})
		desc, err = waiter.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, tableActiveWait)
		if err != nil {
			return m, fmt.Errorf("dedup: wait for table %s to become active: %w", table, err)
		}
	case err != nil:
		return m, fmt.Errorf("dedup: describe table %s: %w", table, err)
	}
	if err := checkKey(desc.Table); err != nil {
		return m, fmt.Errorf("%w: %s", err, table)
	}

	ttl, err := c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return m, fmt.Errorf("dedup: describe time to live of %s: %w", table, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		if name := aws.ToString(d.AttributeName); name != attrTTL {
			// A table has one TTL attribute: ours would never apply.
			return m, fmt.Errorf("dedup: table %s expires items by %q, not %q: turn its TTL off, or use another table", table, name, attrTTL)
		}
		m.TTLEnabled = true
		return m, nil
	}
	_, err = c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)},
	})
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException" {
		m.Warning = fmt.Errorf("dedup: table %s: this endpoint has no UpdateTimeToLive, so TTL is off: expired records are ignored but never deleted", table)
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("dedup: turn on time to live of %s: %w", table, err)
	}
	m.TTLEnabled = true
	return m, nil
}

// checkKey checks that t's key is pk, a string, alone.
func checkKey(t *types.TableDescription) error {
	if t == nil || len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != attrKey {
		return ErrTableKey
	}
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == attrKey && a.AttributeType != types.ScalarAttributeTypeS {
			return ErrTableKey
		}
	}
	return nil
}
