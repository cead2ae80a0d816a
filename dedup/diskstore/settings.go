package diskstore

import "github.com/webhook-dedup/webhook-dedup/dedup/diskstore/diskconf"

// FromSettings is the Config the environment's settings describe. Timeout,
// not the embedded store's own setting (STORE_TIMEOUT), is left to the
// caller.
func FromSettings(s diskconf.Settings) Config { return Config{Dir: s.Dir} }
