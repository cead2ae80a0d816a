package config

import (
	"strings"
	"testing"
	"time"
)

func TestPostgresChosen(t *testing.T) {
	env := base()
	env["DATABASE_URL"] = "postgres://dedup@db:5432/dedup"
	cfg, err := Load(env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store != (Store{Kind: StorePostgres, Variable: "DATABASE_URL"}) {
		t.Errorf("Store = %+v, want PostgreSQL chosen by DATABASE_URL", cfg.Store)
	}
	if !cfg.Postgres.AutoMigrate || cfg.Postgres.TablePrefix != "webhook_dedup_" || cfg.Postgres.PruneInterval != time.Minute ||
		cfg.CacheSize != 0 || cfg.CacheTTL != time.Minute || cfg.StoreTimeout != time.Second {
		t.Errorf("PostgreSQL and cache defaults differ from the documented ones (docs/configuration.md): %+v", cfg)
	}
}

func TestPostgresErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"two stores", map[string]string{"REDIS_URL": "redis://r:6379", "DATABASE_URL": "postgres://db/x"}, []string{"DATABASE_URL", "REDIS_URL", "exactly one store"}},
		{"not postgres", map[string]string{"DATABASE_URL": "mysql://db/x"}, []string{"DATABASE_URL", "postgres://"}},
		{"auto migrate", map[string]string{"DATABASE_AUTO_MIGRATE": "sometimes"}, []string{"DATABASE_AUTO_MIGRATE"}},
		{"cache size", map[string]string{"CACHE_SIZE": "-1"}, []string{"CACHE_SIZE"}},
		{"cache ttl", map[string]string{"CACHE_TTL": "0s"}, []string{"CACHE_TTL"}},
		{"store timeout", map[string]string{"STORE_TIMEOUT": "-1s"}, []string{"STORE_TIMEOUT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := Load(env)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
		})
	}
}
