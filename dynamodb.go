package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// startPingTimeout bounds the look at the table when serving starts.
const startPingTimeout = 5 * time.Second

// openDynamoDB opens the DynamoDB store and looks for its table once: a
// missing table does not stop serving (/readyz answers 503 until it
// exists), but is logged, naming it.
func openDynamoDB(cfg *config.Config, log *zap.Logger) (store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startPingTimeout)
	defer cancel()
	st, _, err := dedup.OpenDynamoDB(ctx, dedup.DynamoDBConfig{Table: cfg.DynamoDBTable, Timeout: cfg.StoreTimeout})
	if err != nil {
		return nil, fmt.Errorf("DYNAMODB_TABLE: %w", err)
	}
	log.Info("store: dynamodb", zap.String("table", cfg.DynamoDBTable), zap.Duration("timeout", cfg.StoreTimeout))
	switch err := st.Ping(ctx); {
	case errors.Is(err, dedup.ErrNoTable):
		log.Error("the DynamoDB table does not exist: /readyz answers 503 until it does (create it with `webhook-dedup migrate`)",
			zap.String("table", cfg.DynamoDBTable), zap.Error(err))
	case err != nil:
		log.Warn("DynamoDB is not reachable yet: /readyz answers 503 until it is", zap.String("table", cfg.DynamoDBTable), zap.Error(err))
	}
	return st, nil
}

// migrateDynamoDB creates the table when missing and turns its TTL on.
func migrateDynamoDB(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) error {
	_, client, err := dedup.OpenDynamoDB(ctx, dedup.DynamoDBConfig{Table: cfg.DynamoDBTable})
	if err != nil {
		return usageError(fmt.Errorf("DYNAMODB_TABLE: %w", err))
	}
	m, err := dedup.MigrateDynamoDB(ctx, client, cfg.DynamoDBTable)
	if err != nil {
		return err
	}
	did := "exists"
	if m.Created {
		did = "created (on-demand capacity)"
	}
	ttl := "on for expires_at"
	if !m.TTLEnabled {
		ttl = "off"
	}
	if _, err := fmt.Fprintf(stdout, "table %s: %s; time to live %s\n", cfg.DynamoDBTable, did, ttl); err != nil {
		return err
	}
	if m.Warning != nil {
		_, err = fmt.Fprintf(stderr, "warning: %v\n", m.Warning)
	}
	return err
}
