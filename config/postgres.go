package config

import (
	"net/url"

	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgname"
)

// completePostgres validates the PostgreSQL settings and the cache's. The table prefix is checked even when another store is
// chosen: a typo should not wait for the day the store changes.
func (c *Config) completePostgres(bad func(name, format string, args ...any)) {
	if c.DatabaseURL != "" {
		// Only the scheme: the rest is pgx's to read, and a URL that
		// does not parse is reported (password redacted) when opened.
		if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad("DATABASE_URL", "not a postgres:// or postgresql:// URL")
		}
	}
	if err := pgname.CheckPrefix(c.DatabaseTablePrefix); err != nil {
		bad("DATABASE_TABLE_PREFIX", "%q: lower-case letters, digits and _, starting with a letter or _, at most 40 (it is written into SQL unquoted)", c.DatabaseTablePrefix)
	}
	if c.PruneInterval <= 0 {
		bad("PRUNE_INTERVAL", "must be a positive duration, got %s", c.PruneInterval)
	}
	if c.CacheSize < 0 {
		bad("CACHE_SIZE", "must not be negative, got %d", c.CacheSize)
	}
	if c.CacheTTL <= 0 {
		bad("CACHE_TTL", "must be a positive duration, got %s", c.CacheTTL)
	}
}
