package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// The largest rate= a route may name: ten thousand attempts a second,
// written per second or per minute. Beyond it the spacing (100µs) is below
// what a timer keeps to, and no app behind a sidecar needs protecting from
// less.
const (
	maxRatePerSecond = 10_000
	maxRatePerMinute = 60 * maxRatePerSecond
)

// Rate is a route's rate= option: at most N delivery attempts, retries
// included, each Per, in each process. The zero Rate sets no limit.
type Rate struct {
	// N is the most attempts each Per; zero with Per zero.
	N int
	// Per is time.Second or time.Minute; zero: no limit.
	Per time.Duration
}

// Interval is the spacing between two attempts' starts that keeps to the
// rate: Per/N. Zero for the zero Rate.
func (r Rate) Interval() time.Duration {
	if r.N == 0 {
		return 0
	}
	return r.Per / time.Duration(r.N)
}

// String returns the rate as written in ROUTES ("20/s"); empty for the
// zero Rate.
func (r Rate) String() string {
	switch r.Per {
	case time.Second:
		return strconv.Itoa(r.N) + "/s"
	case time.Minute:
		return strconv.Itoa(r.N) + "/m"
	}
	return ""
}

// parseRate parses N/s or N/m, N a positive integer up to the largest rate.
func parseRate(s string) (Rate, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	r := Rate{}
	switch strings.TrimSpace(unit) {
	case "s":
		r.Per = time.Second
	case "m":
		r.Per = time.Minute
	default:
		ok = false
	}
	n = strings.TrimSpace(n)
	v, err := strconv.Atoi(n)
	if !ok || err != nil || strings.TrimLeft(n, "0123456789") != "" || v <= 0 {
		return Rate{}, fmt.Errorf("want N/s or N/m, N a positive whole number (rate=20/s), got %q", s)
	}
	if most := map[time.Duration]int{time.Second: maxRatePerSecond, time.Minute: maxRatePerMinute}[r.Per]; v > most {
		return Rate{}, fmt.Errorf("%q is more than the most allowed, %d/s (%d/m)", s, maxRatePerSecond, maxRatePerMinute)
	}
	r.N = v
	return r, nil
}

// OrderOnFailure is ORDER_ON_FAILURE: what an ordered route's key does once
// its head event is dead-lettered.
type OrderOnFailure string

const (
	// OrderSkip goes on with the key's next event (the default).
	OrderSkip OrderOnFailure = "skip"
	// OrderBlock keeps the key waiting until the dead letter is retried
	// and completes, or is forgotten.
	OrderBlock OrderOnFailure = "block"
)

// UnmarshalText parses skip or block.
func (o *OrderOnFailure) UnmarshalText(text []byte) error {
	switch v := OrderOnFailure(text); v {
	case OrderSkip, OrderBlock:
		*o = v
		return nil
	}
	return fmt.Errorf("must be skip or block, got %q", text)
}

// parseModeAndOptions parses what follows a route's source, the items
// after its ';'s: first the delivery mode if one is named (sync or async),
// then the options, each NAME=VALUE once. It fills spec and returns a
// problem for each bad item, quoting entry.
func parseModeAndOptions(entry string, items []string, spec *RouteSpec) []error {
	var errs []error
	seen := map[string]bool{}
	for i, item := range items {
		item = strings.TrimSpace(item)
		name, value, isOption := strings.Cut(item, "=")
		if item == "" {
			errs = append(errs, fmt.Errorf("%q: %w", entry, errNoOption))
			continue
		}
		if !isOption {
			if i > 0 {
				errs = append(errs, fmt.Errorf("%q: %q: the delivery mode is named once, right after the source, and options are NAME=VALUE (PATH=SOURCE;MODE;OPTION…)", entry, item))
				continue
			}
			if err := spec.Delivery.UnmarshalText([]byte(item)); err != nil {
				errs = append(errs, fmt.Errorf("%q: the delivery mode after ';' %v", entry, err))
				continue
			}
			spec.Override = true
			continue
		}
		name = strings.TrimSpace(name)
		if seen[name] {
			errs = append(errs, fmt.Errorf("%q: option %s= given twice", entry, name))
			continue
		}
		seen[name] = true
		switch name {
		case "order":
			k, err := providers.ParseKey(value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%q: option order=: %w", entry, err))
				continue
			}
			spec.Order = k
		case "rate":
			r, err := parseRate(value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%q: option rate=: %w", entry, err))
				continue
			}
			spec.Rate = r
		default:
			errs = append(errs, fmt.Errorf("%q: unknown option %q: want order=SOURCE or rate=N/s (or N/m)", entry, name+"="))
		}
	}
	return errs
}

// hasOptions reports whether the route names an option.
func (r RouteSpec) hasOptions() bool { return r.Order != nil || r.Rate != (Rate{}) }

// optionsNeedAsync reports each route that names an option but delivers
// in sync: the options are about background delivery. Run once each
// route's mode is known (DELIVERY applied).
func optionsNeedAsync(specs []RouteSpec) []error {
	var errs []error
	for _, r := range specs {
		if r.hasOptions() && r.Delivery != policy.AsyncDelivery {
			errs = append(errs, fmt.Errorf("%s: %s: options are for async routes: write ;async after its source, or set DELIVERY=async", r.Path, r.optionNames()))
		}
	}
	return errs
}

// optionNames lists the options the route names, for messages.
func (r RouteSpec) optionNames() string {
	var names []string
	if r.Order != nil {
		names = append(names, "order=")
	}
	if r.Rate != (Rate{}) {
		names = append(names, "rate=")
	}
	return strings.Join(names, " and ")
}

// errNoOption is the problem of an empty item after a ';'.
var errNoOption = errors.New("config: nothing after ';'")
