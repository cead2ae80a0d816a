// Package pgconf is the PostgreSQL store's settings: its environment
// variables (DATABASE_*, PRUNE_INTERVAL), their defaults and help, and
// their validation. It is apart from pgstore, and links no PostgreSQL
// driver, so that the configuration can read and check it without
// linking the store's; pgstore.FromSettings turns it into the store's
// Config.
package pgconf

import (
	"net/url"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgname"
	"github.com/webhook-dedup/webhook-dedup/setting"
)

// Settings are the PostgreSQL store's environment variables. The desc
// tag is what -h and docs/configuration.md say about each.
type Settings struct {
	URL           string        `env:"DATABASE_URL" desc:"postgres:// URL of the PostgreSQL database that keeps the records and the async queue (instead of REDIS_URL)"`
	AutoMigrate   bool          `env:"DATABASE_AUTO_MIGRATE" envDefault:"true" desc:"create the PostgreSQL tables at start when missing; false: expect them (webhook-dedup migrate)"`
	TablePrefix   string        `env:"DATABASE_TABLE_PREFIX" envDefault:"webhook_dedup_" desc:"start of the PostgreSQL tables' names: lower-case letters, digits and _, at most 40"`
	PruneInterval time.Duration `env:"PRUNE_INTERVAL" envDefault:"1m" desc:"how often expired rows are deleted from PostgreSQL, in small batches"`
}

// Choices is the variable that chooses the store: DATABASE_URL.
func (s *Settings) Choices() []setting.Choice {
	return []setting.Choice{{Variable: "DATABASE_URL", Set: s.URL != ""}}
}

// Complete validates the settings. The table prefix and the pruning
// interval are checked even when another store is chosen: a typo should
// not wait for the day the store changes.
func (s *Settings) Complete(setting.Scope) setting.Problems {
	var bad setting.Problems
	if s.URL != "" {
		// Only the scheme: the rest is pgx's to read, and a URL that
		// does not parse is reported (password redacted) when opened.
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad.Add("DATABASE_URL", "not a postgres:// or postgresql:// URL")
		}
	}
	if err := pgname.CheckPrefix(s.TablePrefix); err != nil {
		bad.Add("DATABASE_TABLE_PREFIX", "%q: lower-case letters, digits and _, starting with a letter or _, at most 40 (it is written into SQL unquoted)", s.TablePrefix)
	}
	if s.PruneInterval <= 0 {
		bad.Add("PRUNE_INTERVAL", "must be a positive duration, got %s", s.PruneInterval)
	}
	return bad
}
