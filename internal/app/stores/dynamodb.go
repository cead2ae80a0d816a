package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/dynamostore"
)

// startPingTimeout bounds the look at the table when serving starts.
const startPingTimeout = 5 * time.Second

// openDynamoDB opens the DynamoDB store and looks for its table once: a
// missing table does not stop serving (/readyz answers 503 until it
// exists), but is logged, naming it.
func openDynamoDB(ctx context.Context, cfg *config.Config, env Env) (dedup.Backend, error) {
	ctx, cancel := context.WithTimeout(ctx, startPingTimeout)
	defer cancel()
	dc := dynamostore.FromSettings(cfg.DynamoDB)
	dc.Timeout = cfg.StoreTimeout
	st, _, err := dynamostore.Open(ctx, dc)
	if err != nil {
		return dedup.Backend{}, configError(fmt.Errorf("DYNAMODB_TABLE: %w", err))
	}
	env.Log.Info("store: dynamodb", zap.String("table", cfg.DynamoDB.Table), zap.Duration("timeout", cfg.StoreTimeout))
	switch err := st.Ping(ctx); {
	case errors.Is(err, dynamostore.ErrNoTable):
		env.Log.Error("the DynamoDB table does not exist: /readyz answers 503 until it does (create it with `webhook-dedup migrate`)",
			zap.String("table", cfg.DynamoDB.Table), zap.Error(err))
	case err != nil:
		env.Log.Warn("DynamoDB is not reachable yet: /readyz answers 503 until it is", zap.String("table", cfg.DynamoDB.Table), zap.Error(err))
	}
	return st.Backend(), nil
}

// migrateDynamoDB creates the table when missing and turns its TTL on.
// Its schema is not made of SQL: there is nothing to print.
func migrateDynamoDB(ctx context.Context, cfg *config.Config, printOnly bool, stdout, stderr io.Writer) error {
	if printOnly {
		return configError(errors.New("migrate --print: DATABASE_URL: required: only PostgreSQL's tables are made of SQL to print"))
	}
	_, client, err := dynamostore.Open(ctx, dynamostore.FromSettings(cfg.DynamoDB))
	if err != nil {
		return configError(fmt.Errorf("DYNAMODB_TABLE: %w", err))
	}
	m, err := dynamostore.Migrate(ctx, client, cfg.DynamoDB.Table)
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
	if _, err := fmt.Fprintf(stdout, "table %s: %s; time to live %s\n", cfg.DynamoDB.Table, did, ttl); err != nil {
		return err
	}
	if m.Warning != nil {
		_, err = fmt.Fprintf(stderr, "warning: %v\n", m.Warning)
	}
	return err
}
