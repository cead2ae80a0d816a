// Package setting is what the configuration and the packages whose
// settings it composes share: Problem, what is wrong with one environment
// variable, Scope, what a store's settings are checked against beside
// their own values, and Choice, a variable that chooses a store. It imports nothing of webhook-dedup, so that each
// store's settings can use it without importing config, and config
// without importing a store.
package setting

import (
	"fmt"
	"strings"
	"time"
)

// Problem is what is wrong with one environment variable.
type Problem struct {
	// Variable is the environment variable the problem is about.
	Variable string
	// Message says what is wrong, without the variable's name.
	Message string
}

func (p Problem) Error() string { return p.Variable + ": " + p.Message }

// Problems gathers a check's problems, every one of them rather than the
// first, so that the operator reads them all at once.
type Problems []Problem

// Add records that variable is wrong as fmt.Sprintf(format, args...) says.
func (ps *Problems) Add(variable, format string, args ...any) {
	*ps = append(*ps, Problem{Variable: variable, Message: fmt.Sprintf(format, args...)})
}

// Scope is what a store's settings are checked against beside their own
// values: what the rest of the configuration chose. A field whose
// variable did not parse is zero, and the checks that need it are skipped.
type Scope struct {
	// Chosen is set when the configuration chose this store to keep the
	// records; a setting of a store not chosen may still be checked, so
	// that a mistake shows before the day the store changes.
	Chosen bool
	// StoreTimeout is STORE_TIMEOUT, its default derived: the limit on
	// each store operation.
	StoreTimeout time.Duration
	// UpstreamTimeout is UPSTREAM_TIMEOUT: a store must answer far sooner.
	UpstreamTimeout time.Duration
	// ReplayMaxBytes is REPLAY_MAX_BYTES: the largest response body a
	// record keeps.
	ReplayMaxBytes int
}

// Choice is a variable that chooses a store, and whether it is set. A
// store's settings list theirs (Choices) so that the configuration can
// tell which store runs, and say so, without knowing the variables.
type Choice struct {
	Variable string
	Set      bool
}

// List is a comma-separated list of values (host:port addresses), each
// trimmed of spaces, the empty ones dropped: " a:1, b:2 ," is [a:1 b:2].
// Zero: no value.
type List []string

// UnmarshalText reads a comma-separated list.
func (l *List) UnmarshalText(text []byte) error {
	*l = nil
	for _, v := range strings.Split(string(text), ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
