package pgstore

import "github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgconf"

// FromSettings is the Config the environment's settings describe. Timeout,
// the owner check (AppName, KeyPrefix) and the hooks, which are not
// PostgreSQL's own settings, are left to the caller.
func FromSettings(s pgconf.Settings) Config {
	return Config{URL: s.URL, TablePrefix: s.TablePrefix, PruneInterval: s.PruneInterval, AutoMigrate: s.AutoMigrate}
}
