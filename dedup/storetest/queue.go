package storetest

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// queueStore is what the queue cases exercise: a store's records and its
// queue, side by side.
type queueStore struct {
	dedup.Store
	dedup.Queue
}

// Requests are requests of every shape a queue must keep intact, byte for
// byte.
var Requests = []dedup.Request{
	{
		Method: "POST", RequestURI: "/webhooks/stripe?x=1&y=%20", Host: "hooks.example.com",
		Header:     http.Header{"Content-Type": {"application/json"}, "Stripe-Signature": {"t=1,v1=abc"}, "X-Many": {"a", "", "c"}},
		RemoteAddr: "203.0.113.9:41234", TLS: true,
		Body:  []byte(`{"id":"evt_1"}`),
		Route: "/webhooks/stripe", Namespace: "stripe", TTL: 96 * time.Hour,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	},
	{Method: "PUT", RequestURI: "/", Host: "h", RemoteAddr: "[::1]:1"},
	{Method: "POST", RequestURI: "/b", Header: http.Header{"x-not-canonical": {"v"}}, Body: []byte{0, 0xff, '\n', 0x80},
		Route: "/b", Namespace: "/b", TTL: 1500 * time.Millisecond, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
	// Header values may carry bytes that are not UTF-8 (obs-text): they
	// reach the app as they came.
	{Method: "POST", RequestURI: "/raw", Header: http.Header{"X-Raw": {"caf\xe9", "\xff\xfe", "ok"}}, Body: []byte("{}")},
}

// Request is the request the queue cases enqueue: every part of it set,
// a header of several values among them.
var Request = Requests[0]

// queueTests is the queue conformance suite. Each case gets a store of its
// own, so that take sees only the case's events.
var queueTests = slices.Concat(enqueueCases, deliveryCases, operatorCases, edgeCases, orderCases, eventCases, requestCases)

// queueCase is one case of the queue conformance suite: run gets the
// case's own store, and again reopens it on the same data.
type queueCase struct {
	name string
	run  func(t *testing.T, s queueStore, again func() queueStore)
}

// runQueue runs the queue cases, each on a store of its own from open.
func runQueue(t *testing.T, open Open) {
	for _, tt := range queueTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, again := open(t)
			if again == nil {
				t.Fatal("a store that keeps a queue must open again on the same data (Open's again)")
			}
			tt.run(t, queueStore{b.Store, b.Queue}, func() queueStore {
				b := again()
				return queueStore{b.Store, b.Queue}
			})
		})
	}
}
