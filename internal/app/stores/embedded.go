package stores

import (
	"context"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
)

// openMemory is the embedded store in process memory: nothing configured.
func openMemory(_ context.Context, _ *config.Config, env Env) (dedup.Backend, error) {
	env.Log.Warn("no store configured (DATA_DIR, REDIS_URL, REDIS_CLUSTER_ADDRS, REDIS_SENTINEL_ADDRS, DYNAMODB_TABLE or DATABASE_URL): using the embedded in-memory store, which only deduplicates within this one process; run one replica only, and expect duplicates after a restart")
	return memstore.New().Backend(), nil
}

// openDisk is the embedded store in a file under DATA_DIR.
func openDisk(_ context.Context, cfg *config.Config, env Env) (dedup.Backend, error) {
	dc := diskstore.FromSettings(cfg.Disk)
	dc.Timeout = cfg.StoreTimeout
	st, err := diskstore.Open(dc)
	if err != nil {
		return dedup.Backend{}, configError(fmt.Errorf("DATA_DIR: %w", err))
	}
	env.Log.Info("store: embedded, on disk", zap.String("file", filepath.Join(cfg.Disk.Dir, diskstore.File)))
	return st.Backend(), nil
}
