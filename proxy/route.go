package proxy

import (
	"sort"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/providers"
)

// Route sends the webhooks under one path prefix to a source of event IDs.
type Route struct {
	// Path is a prefix matched on whole segments: "/hooks" matches "/hooks"
	// and "/hooks/x", not "/hooksx". "/" matches every path.
	Path   string
	Source *providers.Source
	// Delivery is how the route's first-seen webhooks reach the app. If
	// zero, SyncDelivery.
	Delivery DeliveryMode
}

// routeTable finds the longest matching prefix. Routes are few, so a sorted
// slice scanned from the longest path is both simple and fast.
type routeTable []Route

func newRouteTable(routes []Route) routeTable {
	t := append(routeTable(nil), routes...)
	sort.SliceStable(t, func(i, j int) bool { return len(t[i].Path) > len(t[j].Path) })
	return t
}

// match returns the route for path, or nil.
func (t routeTable) match(path string) *Route {
	for i := range t {
		if segmentPrefix(path, t[i].Path) {
			return &t[i]
		}
	}
	return nil
}

func segmentPrefix(path, prefix string) bool {
	if prefix == "/" {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}
