package config

import (
	"strings"
	"testing"
	"time"
)

func TestDynamoDBChosen(t *testing.T) {
	env := base()
	env["DYNAMODB_TABLE"] = "webhook-dedup"
	c, err := Load(env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != (Store{Kind: StoreDynamoDB, Variable: "DYNAMODB_TABLE"}) {
		t.Errorf("Store = %+v, want DynamoDB chosen by DYNAMODB_TABLE", c.Store)
	}
	if c.StoreTimeout != time.Second {
		t.Errorf("StoreTimeout = %s, want the default 1s", c.StoreTimeout)
	}
}

func TestDynamoDBErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"with Redis", map[string]string{"REDIS_URL": "redis://r:6379", "DYNAMODB_TABLE": "t-1"}, "DYNAMODB_TABLE: set together with REDIS_URL"},
		{"bad name", map[string]string{"DYNAMODB_TABLE": "a b"}, `DYNAMODB_TABLE: "a b" is not a table name`},
		{"replay larger than an item", map[string]string{"DYNAMODB_TABLE": "t-1", "REPLAY_MAX_BYTES": "400000"}, "REPLAY_MAX_BYTES: 400000 is more than DynamoDB's items hold"},
		{"Redis settings without Redis", map[string]string{"DYNAMODB_TABLE": "t-1", "REDIS_PASSWORD": "x"}, "REDIS_PASSWORD: set, but no Redis is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := Load(env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	env := base()
	env["DYNAMODB_TABLE"] = "arn:aws:dynamodb:eu-west-1:123456789012:table/webhook-dedup"
	if _, err := Load(env); err != nil {
		t.Errorf("a table's ARN: %v", err)
	}
}

func TestStoreTimeout(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          map[string]string
		store, redis time.Duration
	}{
		{"default", nil, time.Second, time.Second},
		{"a quarter of a short UPSTREAM_TIMEOUT", map[string]string{"UPSTREAM_TIMEOUT": "2s"}, 500 * time.Millisecond, 500 * time.Millisecond},
		{"set: Redis follows", map[string]string{"STORE_TIMEOUT": "300ms"}, 300 * time.Millisecond, 300 * time.Millisecond},
		{"REDIS_TIMEOUT wins for Redis", map[string]string{"STORE_TIMEOUT": "300ms", "REDIS_TIMEOUT": "700ms"}, 300 * time.Millisecond, 700 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			env["REDIS_URL"] = "redis://r:6379"
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := Load(env)
			if err != nil {
				t.Fatal(err)
			}
			if c.StoreTimeout != tc.store || c.Redis.Timeout != tc.redis {
				t.Errorf("StoreTimeout %s, RedisTimeout %s; want %s, %s", c.StoreTimeout, c.Redis.Timeout, tc.store, tc.redis)
			}
		})
	}
	for _, tc := range []struct{ value, want string }{
		{"-1s", "STORE_TIMEOUT: must be a positive duration"},
		{"10s", "STORE_TIMEOUT: 10s is more than a quarter of UPSTREAM_TIMEOUT"},
	} {
		env := base()
		env["STORE_TIMEOUT"] = tc.value
		if _, err := Load(env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("STORE_TIMEOUT=%s: Load = %v, want an error containing %q", tc.value, err, tc.want)
		}
	}
}
