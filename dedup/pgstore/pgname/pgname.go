// Package pgname is the rule for the table-name prefix the PostgreSQL
// store writes into its SQL unquoted (DATABASE_TABLE_PREFIX), on its own so
// that configuration can check it before the store, and its driver, are
// ever loaded.
package pgname

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrBadPrefix means a table prefix is not the start of a plain SQL
// identifier.
var ErrBadPrefix = errors.New("dedup: table prefix must be lower-case letters, digits and underscores, starting with a letter or underscore, at most 40 characters")

// prefixRE is what a prefix may be: it is written into the SQL unquoted,
// so it must stay a plain identifier, and every name made from it (the
// longest adds "records_expires_at") must fit PostgreSQL's 63 bytes.
var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// CheckPrefix reports whether prefix can start the tables' names.
func CheckPrefix(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("%w: %q", ErrBadPrefix, prefix)
	}
	return nil
}
