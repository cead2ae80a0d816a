package config

import (
	"errors"

	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// RESIGN's values.
const (
	ResignAuto = "auto"
	ResignOff  = "off"
)

// SourceOptions is what the providers package needs to build spec's
// source: ProviderOptions and, on an async route without
// ALLOW_UNVERIFIED_ASYNC, VerifiedOnly, so that auto there recognises only
// the senders whose signatures it verifies.
func (c *Config) SourceOptions(spec RouteSpec) providers.Options {
	o := c.ProviderOptions()
	o.VerifiedOnly = spec.Delivery == policy.AsyncDelivery && !c.AllowUnverifiedAsync
	return o
}

// completeVerified validates RESIGN and builds every route's source, so
// that its problems are reported with the others. An async route on a
// preset whose signatures it does not verify is refused unless
// ALLOW_UNVERIFIED_ASYNC: it would answer a forged request carrying a real
// event ID 202 and queue it, and the genuine event, a duplicate then,
// would never reach the app. A sync route has no such problem: the app
// sees every forwarded request and its answer settles the claim.
func (c *Config) completeVerified(bad func(name, format string, args ...any)) {
	if c.Resign != ResignAuto && c.Resign != ResignOff {
		bad("RESIGN", "must be %s or %s, got %q", ResignAuto, ResignOff, c.Resign)
	}
	const accept = "or set ALLOW_UNVERIFIED_ASYNC=true to accept the risk"
	for _, spec := range c.RouteSpecs {
		src, err := providers.ParseSource(spec.Path, spec.Source, c.SourceOptions(spec))
		switch {
		case errors.Is(err, providers.ErrNothingVerified):
			bad("ROUTES", "%s=%s: %v; %s", spec.Path, spec.Source, err, accept)
			continue
		case err != nil:
			bad("ROUTES", "%s=%s: %v", spec.Path, spec.Source, err)
			continue
		case spec.Delivery != policy.AsyncDelivery || c.AllowUnverifiedAsync:
			continue
		}
		for _, p := range src.Unverified() {
			if p.SecretVar == "" {
				bad("ROUTES", "%s=%s on async delivery: %s signs its webhooks, but webhook-dedup does not verify its signatures, "+
					"so a forged request carrying a real event ID would be queued and the genuine event answered as a duplicate the app never sees; "+
					"deliver the route sync (%s=%s;sync), %s", spec.Path, spec.Source, p.Name, spec.Path, spec.Source, accept)
				continue
			}
			bad(p.SecretVar, "required for the async route %s: without it a forged request carrying a real event ID would be queued "+
				"and the genuine event answered as a duplicate the app never sees; set it, deliver the route sync (%s=%s;sync), %s",
				spec.Path, spec.Path, spec.Source, accept)
		}
	}
}
