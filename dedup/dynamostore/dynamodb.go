package dynamostore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/logging"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
)

// ErrNoTable means the DynamoDB table does not exist (or is not yet
// active): `webhook-dedup migrate` creates it.
var ErrNoTable = errors.New("dedup: no such DynamoDB table")

// One item per key. rec is the record as encoding.go writes it for Redis;
// tok is the owner's token, only while in flight, so that complete and
// release can be conditional on it. DynamoDB's TTL deletes an item only
// eventually (up to days after expires_at), so every condition and read
// judges expiry from expires_ms, on this process's clock.
const (
	attrKey       = "pk"         // S: the record's key
	attrRecord    = "rec"        // B: encodeInFlight or encodeCompleted
	attrToken     = "tok"        // B: the claim token, in flight only
	attrExpiresMS = "expires_ms" // N: expiry, unix milliseconds
	attrTTL       = "expires_at" // N: expiry, unix seconds rounded up: the table's TTL attribute
)

// The conditions of the writes. A claim takes a free key, or one whose
// record expired but is not yet deleted; complete and release need the
// caller's unexpired claim.
const (
	claimCondition = "attribute_not_exists(" + attrKey + ") OR " + attrExpiresMS + " <= :now"
	ownerCondition = attrToken + " = :tok AND " + attrExpiresMS + " > :now"
)

// Client is what the DynamoDB store needs of the SDK's
// *dynamodb.Client.
type Client interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Store is a store kept in one DynamoDB table: one item per key,
// claimed by a conditional PutItem and read strongly consistently. It is
// safe for concurrent use.
type Store struct {
	client Client
	table  *string
	// timeout bounds each operation, the SDK's retries included.
	timeout time.Duration
}

// Config says which table to use and how long each operation may
// take.
type Config struct {
	// Table is the table's name (or ARN). Required.
	Table string
	// Timeout bounds each operation, the SDK's retries of throttled or
	// failed requests included. If zero, 1s.
	Timeout time.Duration
}

// New returns a store that keeps its records in c's table
// cfg.Table.
func New(c Client, cfg Config) *Store {
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	return &Store{client: c, table: aws.String(cfg.Table), timeout: cfg.Timeout}
}

// Open builds an SDK client the way every AWS tool does
// (AWS_REGION, AWS_PROFILE, web identity for IRSA or EKS Pod Identity,
// AWS_ENDPOINT_URL_DYNAMODB, …) and returns a store over it. It fails
// only when no region is configured; it does not reach DynamoDB.
func Open(ctx context.Context, cfg Config) (*Store, *dynamodb.Client, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx,
		// The proxy's concurrency, not the SDK's default of 10 idle
		// connections, decides how many are kept open.
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = 256
		})),
		// Several short-paced retries fit in one operation's timeout;
		// the SDK's default backoff (up to 20s) would not.
		// Failures reach the caller as errors; the SDK's own log lines
		// (connection reuse) would bypass the proxy's logger.
		awsconfig.WithLogger(logging.Nop{}),
		awsconfig.WithRetryer(func() aws.Retryer {
			return awsretry.NewStandard(func(o *awsretry.StandardOptions) {
				o.MaxAttempts = 8
				o.MaxBackoff = 200 * time.Millisecond
			})
		}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("dedup: AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, nil, errors.New("dedup: no AWS region: set AWS_REGION (or a region in the AWS_PROFILE's configuration)")
	}
	c := dynamodb.NewFromConfig(awsCfg)
	return New(c, cfg), c, nil
}

// Close does nothing: the SDK's client holds no resources to release.
func (s *Store) Close() error { return nil }

// Claim takes key for lease if no live record holds it, with one
// conditional PutItem. If the key is free it returns the new Claim and a
// Record in state Absent (the state before the claim); otherwise a zero
// Claim and the record that holds the key. A lost condition is a lost
// claim, never an error.
func (s *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	if err := storeop.CheckClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, dedup.Record{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	tok := codec.NewToken()
	// A holder that expires between the failed condition and the read
	// of it frees the key: try again, a few times.
	for range 3 {
		now := time.Now()
		item := s.item(key, codec.EncodeInFlight(tok, now.UnixMilli()), now, lease)
		item[attrToken] = &types.AttributeValueMemberB{Value: tok[:]}
		old, err := s.put(ctx, item, claimCondition, map[string]types.AttributeValue{":now": millisValue(now)})
		if err == nil {
			return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, nil
		}
		if !errors.Is(err, errConditionFailed) {
			return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
		}
		if old == nil {
			if old, err = s.get(ctx, key); err != nil {
				return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
			}
		}
		if b, ok := old[attrToken].(*types.AttributeValueMemberB); ok && bytes.Equal(b.Value, tok[:]) {
			// The SDK retried a claim whose first attempt took the key
			// but whose answer was lost: the key is the caller's.
			return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, nil
		}
		rec, live, err := decodeItem(old, time.Now())
		if err != nil {
			return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
		}
		if live {
			return dedup.Claim{}, rec, nil
		}
	}
	return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: the key kept changing hands", key)
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl, with one PutItem conditional on c's token. If c no longer
// owns its key it returns ErrNotOwner and changes nothing.
func (s *Store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	tok, err := storeop.CheckComplete(ctx, c, res, ttl)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	now := time.Now()
	value := codec.EncodeCompleted(res, now.Unix())
	old, err := s.put(ctx, s.item(c.Key, value, now, ttl), ownerCondition, ownerValues(tok, now))
	if err == nil {
		return nil
	}
	if !errors.Is(err, errConditionFailed) {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if old == nil {
		if old, err = s.get(ctx, c.Key); err != nil {
			return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
		}
	}
	if b, ok := old[attrRecord].(*types.AttributeValueMemberB); ok && bytes.Equal(b.Value, value) {
		// The value holds the completion time (in seconds): finding
		// exactly it means the SDK retried a write whose first attempt
		// succeeded but whose answer was lost.
		return nil
	}
	return fmt.Errorf("dedup: complete %s: %w", c.Key, dedup.ErrNotOwner)
}

// Release deletes c's in-flight record so the event can be claimed again,
// with one DeleteItem conditional on c's token. If c no longer owns its key
// it returns ErrNotOwner and changes nothing.
func (s *Store) Release(ctx context.Context, c dedup.Claim) error {
	tok, err := storeop.CheckOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err = s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 s.table,
		Key:                       keyOf(c.Key),
		ConditionExpression:       aws.String(ownerCondition),
		ExpressionAttributeValues: ownerValues(tok, time.Now()),
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return fmt.Errorf("dedup: release %s: %w", c.Key, dedup.ErrNotOwner)
	}
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	return nil
}

// Lookup returns the record for key, or ErrNotFound, from a strongly
// consistent read.
func (s *Store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	item, err := s.get(ctx, key)
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	rec, live, err := decodeItem(item, time.Now())
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	if !live {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, dedup.ErrNotFound)
	}
	return rec, nil
}

// Forget deletes the record for key, whatever its state, and reports
// whether there was a live one.
func (s *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:    s.table,
		Key:          keyOf(key),
		ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	_, live, err := decodeItem(out.Attributes, time.Now())
	return live || err != nil, nil // an unreadable item was there too
}

// Ping checks that the table exists and is active (DescribeTable); a
// missing table is ErrNoTable.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table})
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		return fmt.Errorf("dedup: ping: %w: %s (create it with `webhook-dedup migrate`)", ErrNoTable, *s.table)
	case err != nil:
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if st := out.Table.TableStatus; st != types.TableStatusActive && st != types.TableStatusUpdating {
		return fmt.Errorf("dedup: ping: %w: %s is %s", ErrNoTable, *s.table, st)
	}
	return nil
}

// errConditionFailed is put's report of a write whose condition did not
// hold.
var errConditionFailed = errors.New("condition failed")

// put writes item if condition holds. When it does not, put returns
// errConditionFailed and the item that stopped it, if DynamoDB sent it
// back (ReturnValuesOnConditionCheckFailure; dynalite does not, and the
// caller reads it instead).
func (s *Store) put(ctx context.Context, item map[string]types.AttributeValue, condition string, values map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           s.table,
		Item:                                item,
		ConditionExpression:                 aws.String(condition),
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return failed.Item, errConditionFailed
	}
	return nil, err
}

// get reads key's item strongly consistently; nil when there is none.
func (s *Store) get(ctx context.Context, key string) (map[string]types.AttributeValue, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      s.table,
		Key:            keyOf(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// item is the item holding record value under key for d from now, in
// whole milliseconds (at least one).
func (s *Store) item(key string, value []byte, now time.Time, d time.Duration) map[string]types.AttributeValue {
	ms := now.UnixMilli() + storeop.Millis(d)
	return map[string]types.AttributeValue{
		attrKey:       &types.AttributeValueMemberS{Value: key},
		attrRecord:    &types.AttributeValueMemberB{Value: value},
		attrExpiresMS: &types.AttributeValueMemberN{Value: strconv.FormatInt(ms, 10)},
		attrTTL:       &types.AttributeValueMemberN{Value: strconv.FormatInt((ms+999)/1000, 10)},
	}
}

func keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: key}}
}

func millisValue(t time.Time) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.UnixMilli(), 10)}
}

func ownerValues(tok [codec.TokenLen]byte, now time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":tok": &types.AttributeValueMemberB{Value: tok[:]},
		":now": millisValue(now),
	}
}

// decodeItem reads an item as the record it holds and reports whether it
// is live at now; a nil item is not live.
func decodeItem(item map[string]types.AttributeValue, now time.Time) (dedup.Record, bool, error) {
	if item == nil {
		return dedup.Record{}, false, nil
	}
	value, ok1 := item[attrRecord].(*types.AttributeValueMemberB)
	expires, ok2 := item[attrExpiresMS].(*types.AttributeValueMemberN)
	if !ok1 || !ok2 {
		return dedup.Record{}, false, fmt.Errorf("%w: item lacks %s or %s", codec.ErrBadRecord, attrRecord, attrExpiresMS)
	}
	ms, err := strconv.ParseInt(expires.Value, 10, 64)
	if err != nil {
		return dedup.Record{}, false, fmt.Errorf("%w: %s %q", codec.ErrBadRecord, attrExpiresMS, expires.Value)
	}
	rec, err := codec.DecodeRecord(string(value.Value))
	if err != nil {
		return dedup.Record{}, false, err
	}
	// Whole milliseconds, judged as the write conditions judge them. An
	// expiry so far ahead that its TTL overflows a Duration (only a
	// foreign or corrupt item has one) is capped, never wrapped negative.
	nowMS := now.UnixMilli()
	if ms <= nowMS {
		return rec, false, nil
	}
	rec.TTL = time.Duration(min(ms-nowMS, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	return rec, true, nil
}

// Features is what DynamoDB can do: records shared by every replica.
// Sync delivery only: a queue there would need transactions and scans
// this store is not built on.
func Features() dedup.Features { return dedup.Features{Durable: true, Shared: true} }

// Backend is s as the program uses it: its records.
func (s *Store) Backend() dedup.Backend {
	return dedup.Backend{Features: Features(), Store: s, Close: s.Close}
}
