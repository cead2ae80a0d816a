package dynamostore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/dynamotest"
)

var (
	_ dedup.Store = (*Store)(nil)
	_ Client      = (*dynamodb.Client)(nil)
	_ TableClient = (*dynamodb.Client)(nil)
)

// openDynamoDB opens a store on srv the way the binary does (the SDK's
// configuration from the environment) and creates its table.
func openDynamoDB(t testing.TB, srv *dynamotest.Server, table string) (*Store, *dynamodb.Client) {
	t.Helper()
	srv.Setenv(t)
	s, c, err := Open(context.Background(), Config{Table: table, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	m, err := Migrate(context.Background(), c, table)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Created {
		t.Fatalf("MigrateDynamoDB on a fresh server: %+v, want Created", m)
	}
	return s, c
}

func TestDynamoDBStore(t *testing.T) {
	srv := dynamotest.New(t)
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		s, _ := openDynamoDB(t, srv, "webhook-dedup")
		return s.Backend(), nil
	})
}

// BenchmarkDynamoDB runs on dynalite, not AWS: the SDK's cost per request
// (allocations, CPU) is real; the latency is a Node.js process on
// loopback, not DynamoDB's.
func BenchmarkDynamoDB(b *testing.B) {
	s, _ := openDynamoDB(b, dynamotest.New(b), "bench")
	storetest.Bench(b, s.Backend())
}

// An expired record that DynamoDB's TTL has not deleted yet (it may take
// days) is free to claim, and invisible to Lookup and Forget.
func TestDynamoDBExpiredItemNotYetDeleted(t *testing.T) {
	s, c := openDynamoDB(t, dynamotest.New(t), "expired")
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)
	item := s.item("k", codec.EncodeCompleted(dedup.Result{Status: 200}, past.Unix()), past, time.Second)
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("expired"), Item: item}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, "k"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("Lookup of an expired item = %v, want ErrNotFound", err)
	}
	if had, err := s.Forget(ctx, "k"); err != nil || had {
		t.Errorf("Forget of an expired item = %v, %v; want false", had, err)
	}
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("expired"), Item: item}); err != nil {
		t.Fatal(err)
	}
	if _, rec := storetest.MustClaim(t, s, "k", storetest.Lease); rec.State != dedup.Absent {
		t.Errorf("Claim over an expired item: %v, want absent", rec.State)
	}
}

// A lease that expired, still stored, no longer lets its owner complete or
// release: the key is free for the next claim.
func TestDynamoDBExpiredLeaseNotOwned(t *testing.T) {
	s, _ := openDynamoDB(t, dynamotest.New(t), "expired-lease")
	ctx := context.Background()
	c, _ := storetest.MustClaim(t, s, "k", storetest.Short)
	storetest.Eventually(t, "the lease to expire", func() bool {
		_, err := s.Lookup(ctx, "k")
		return errors.Is(err, dedup.ErrNotFound)
	})
	if err := s.Complete(ctx, c, storetest.Replayed, storetest.Keep); !errors.Is(err, dedup.ErrNotOwner) {
		t.Errorf("Complete after the lease expired = %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, c); !errors.Is(err, dedup.ErrNotOwner) {
		t.Errorf("Release after the lease expired = %v, want ErrNotOwner", err)
	}
}

func TestDynamoDBMigrate(t *testing.T) {
	srv := dynamotest.New(t)
	_, c := openDynamoDB(t, srv, "migrated")
	ctx := context.Background()
	// dynalite has no UpdateTimeToLive: a warning, not a failure; and a
	// second run changes nothing.
	m, err := Migrate(ctx, c, "migrated")
	if err != nil {
		t.Fatal(err)
	}
	if m.Created || m.TTLEnabled || m.Warning == nil || !strings.Contains(m.Warning.Error(), "UpdateTimeToLive") {
		t.Errorf("second MigrateDynamoDB = %+v, want not created, a warning naming UpdateTimeToLive", m)
	}
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("migrated")})
	if err != nil {
		t.Fatal(err)
	}
	if bm := out.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("billing mode %+v, want PAY_PER_REQUEST", bm)
	}

	// A table keyed otherwise is refused, not used.
	_, err = c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("other"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(ctx, c, "other"); !errors.Is(err, ErrTableKey) {
		t.Errorf("MigrateDynamoDB of a table keyed by id = %v, want ErrTableKey", err)
	}
}

func TestDynamoDBMissingTable(t *testing.T) {
	srv := dynamotest.New(t)
	srv.Setenv(t)
	s, c, err := Open(context.Background(), Config{Table: "not-yet"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = s.Ping(ctx)
	if !errors.Is(err, ErrNoTable) || !strings.Contains(err.Error(), "not-yet") {
		t.Errorf("Ping without the table = %v, want ErrNoTable naming it", err)
	}
	if _, _, err := s.Claim(ctx, "k", storetest.Lease); err == nil {
		t.Error("Claim without the table succeeded")
	}
	if _, err := Migrate(ctx, c, "not-yet"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping once the table exists: %v", err)
	}
}

// An endpoint that does not answer is a store error within the timeout,
// after the SDK's retries, never a lost claim.
func TestDynamoDBUnreachable(t *testing.T) {
	// Nothing listens on port 1.
	(&dynamotest.Server{Endpoint: "http://127.0.0.1:1"}).Setenv(t)
	s, _, err := Open(context.Background(), Config{Table: "t", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.Claim(ctx, "k", storetest.Lease); err == nil || errors.Is(err, dedup.ErrNotOwner) {
		t.Errorf("Claim with DynamoDB unreachable = %v, want a store error", err)
	}
	if err := s.Ping(ctx); err == nil || errors.Is(err, ErrNoTable) {
		t.Errorf("Ping with DynamoDB unreachable = %v, want a store error", err)
	}
}

func TestOpenDynamoDBNeedsRegion(t *testing.T) {
	(&dynamotest.Server{Endpoint: "http://127.0.0.1:1"}).Setenv(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	_, _, err := Open(context.Background(), Config{Table: "t"})
	if err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Errorf("OpenDynamoDB without a region = %v, want an error naming AWS_REGION", err)
	}
}

// lossyEndpoint puts a proxy in front of srv that replaces the answers to
// PutItem for which lose says so (given the request's number, from 1) by
// a 500, after dynalite acted on the request, and points the AWS SDK's
// environment at it. It counts the PutItem requests.
func lossyEndpoint(t *testing.T, srv *dynamotest.Server, lose func(n int64) bool) *atomic.Int64 {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var count atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasSuffix(resp.Request.Header.Get("X-Amz-Target"), ".PutItem") || !lose(count.Add(1)) {
			return nil
		}
		resp.Body.Close()
		resp.StatusCode, resp.Status = http.StatusInternalServerError, "500 Internal Server Error"
		resp.Body = io.NopCloser(strings.NewReader(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost"}`))
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		resp.Header.Del("X-Amz-Crc32") // the checksum of dynalite's answer
		return nil
	}
	front := httptest.NewServer(rp)
	t.Cleanup(front.Close)
	(&dynamotest.Server{Endpoint: front.URL}).Setenv(t)
	return &count
}

// When the SDK retries a write whose first attempt succeeded but whose
// answer was lost, the retry's failed condition finds the caller's own
// write: the claim is still won, the completion still done.
func TestDynamoDBLostAnswerRetried(t *testing.T) {
	srv := dynamotest.New(t)
	openDynamoDB(t, srv, "lossy") // creates the table
	// The first answer to each PutItem is lost (a 500 instead).
	odd := func(n int64) bool { return n%2 == 1 }
	puts := lossyEndpoint(t, srv, odd)
	s, _, err := Open(context.Background(), Config{Table: "lossy", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := storetest.MustClaim(t, s, "k", storetest.Lease)
	if err := s.Complete(context.Background(), c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatalf("Complete whose first answer was lost: %v", err)
	}
	if n := puts.Load(); n != 4 {
		t.Errorf("%d PutItem requests, want 4 (two writes, each tried twice)", n)
	}
	if rec := storetest.MustLookup(t, s, "k"); rec.State != dedup.Completed {
		t.Errorf("state %v, want completed", rec.State)
	}
}

// Throttling is retried by the SDK within the timeout, and then is a
// store error: never a lost claim, never a claim won. The endpoint
// throttles every request, so nothing is ever written.
func TestDynamoDBThrottled(t *testing.T) {
	var requests atomic.Int64
	throttling := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`)
	}))
	t.Cleanup(throttling.Close)
	(&dynamotest.Server{Endpoint: throttling.URL}).Setenv(t)
	s, _, err := Open(context.Background(), Config{Table: "throttled", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, rec, err := s.Claim(context.Background(), "k", storetest.Lease)
	var throttled *types.ThrottlingException
	if !errors.As(err, &throttled) || c != (dedup.Claim{}) || rec.State != dedup.Absent {
		t.Errorf("Claim while throttled = %+v, %v, %v; want a ThrottlingException and no claim", c, rec.State, err)
	}
	if n := requests.Load(); n < 2 {
		t.Errorf("%d requests: the SDK did not retry the throttled claim", n)
	}
}

// FuzzDecodeItem: any item read back, whatever wrote it, decodes to a
// record or an error, never a panic; a live record has time left.
func FuzzDecodeItem(f *testing.F) {
	f.Add(codec.EncodeCompleted(storetest.Replayed, 1700000000), "1700000060000")
	f.Add(codec.EncodeInFlight([codec.TokenLen]byte{1}, 1700000000000), "1700000000001")
	f.Add([]byte{}, "")
	f.Add([]byte{0x02}, "-1")
	f.Add([]byte{0x01}, "1e400")
	now := time.UnixMilli(1700000000000)
	f.Fuzz(func(t *testing.T, value []byte, expires string) {
		item := map[string]types.AttributeValue{
			attrKey:       &types.AttributeValueMemberS{Value: "k"},
			attrRecord:    &types.AttributeValueMemberB{Value: value},
			attrExpiresMS: &types.AttributeValueMemberN{Value: expires},
		}
		rec, live, err := decodeItem(item, now)
		if err != nil && live {
			t.Fatalf("decodeItem = %+v, live, %v: live with an error", rec, err)
		}
		if live && rec.TTL <= 0 {
			t.Fatalf("live record with TTL %s", rec.TTL)
		}
	})
}
