package serve

import (
	"strings"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// resigners is RESIGN=auto: for a queued request's route and namespace,
// the Resigner of the preset that verified it, as the routes are
// configured now. The current configuration is the one that counts: after
// a secret rotation, the app expects the new first secret. nil for a route
// or a preset that signs no header-borne timestamp, or that verifies
// nothing (no secret).
func resigners(routes []proxy.Route) func(route, namespace string) delivery.Resigner {
	sources := make(map[string]*providers.Source, len(routes))
	for _, r := range routes {
		sources[r.Path] = r.Source
	}
	return func(route, namespace string) delivery.Resigner {
		src := sources[route]
		if src == nil {
			return nil
		}
		e := src.Extractor(namespace)
		if e == nil {
			return nil
		}
		return e.Resigner
	}
}

// unverifiedAsync is the warning, logged at start, for an async route that
// accepts a preset's webhooks without verifying them, which configuration
// refuses unless ALLOW_UNVERIFIED_ASYNC accepts the risk; false for any
// other route.
func unverifiedAsync(spec config.RouteSpec, src *providers.Source) (config.Warning, bool) {
	if spec.Delivery != policy.AsyncDelivery {
		return config.Warning{}, false
	}
	var names []string
	for _, p := range src.Unverified() {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return config.Warning{}, false
	}
	return config.Warning{
		Variable: "ALLOW_UNVERIFIED_ASYNC",
		Message: "the async route " + spec.Path + " queues these senders' webhooks without verifying their signatures: " + strings.Join(names, ", ") +
			": a forged request carrying a real event ID is answered 202 and the genuine event then a duplicate the app never sees",
	}, true
}
