// Package policy holds the choices an operator makes about how webhooks
// are handled that both the configuration and the request path know: how
// a route delivers (DELIVERY), what a webhook gets while the store is
// unreachable (ON_STORE_ERROR) or without an event ID (ON_MISSING_ID),
// and LEASE_TTL's default. It imports nothing of webhook-dedup, so that
// config, the bottom layer, need not import proxy or upstream for them.
package policy

import "fmt"

// StoreErrorPolicy is what a webhook gets while the store is unreachable
// (ON_STORE_ERROR). The zero value is RejectOnStoreError.
type StoreErrorPolicy uint8

const (
	// RejectOnStoreError answers 503 with Retry-After: the sender retries
	// once the store is back, and nothing is forwarded unchecked.
	RejectOnStoreError StoreErrorPolicy = iota
	// ForwardOnStoreError fails open: the webhook is forwarded unchecked,
	// logged and counted, and may then be processed twice.
	ForwardOnStoreError
)

// String returns the policy's name in ON_STORE_ERROR: "reject" or "forward".
func (p StoreErrorPolicy) String() string {
	if p == ForwardOnStoreError {
		return "forward"
	}
	return "reject"
}

// UnmarshalText parses "reject" or "forward".
func (p *StoreErrorPolicy) UnmarshalText(text []byte) error {
	switch string(text) {
	case "reject":
		*p = RejectOnStoreError
	case "forward":
		*p = ForwardOnStoreError
	default:
		return fmt.Errorf("must be reject or forward, got %q", text)
	}
	return nil
}

// MissingIDPolicy is what a webhook on a dedup route gets when it carries
// no event ID (ON_MISSING_ID). The zero value is ForwardMissingID.
type MissingIDPolicy uint8

const (
	// ForwardMissingID forwards it unchecked: handshakes and pings often
	// carry no ID, and the app decides.
	ForwardMissingID MissingIDPolicy = iota
	// RejectMissingID answers 400.
	RejectMissingID
)

// String returns the policy's name in ON_MISSING_ID: "forward" or "reject".
func (p MissingIDPolicy) String() string {
	if p == RejectMissingID {
		return "reject"
	}
	return "forward"
}

// UnmarshalText parses "forward" or "reject".
func (p *MissingIDPolicy) UnmarshalText(text []byte) error {
	switch string(text) {
	case "forward":
		*p = ForwardMissingID
	case "reject":
		*p = RejectMissingID
	default:
		return fmt.Errorf("must be forward or reject, got %q", text)
	}
	return nil
}

// DeliveryMode is how a route hands webhooks to the app (DELIVERY, or
// ";sync" / ";async" after a route's source). The zero value is SyncDelivery.
type DeliveryMode uint8

const (
	// SyncDelivery forwards a first-seen webhook while the sender waits,
	// and relays the app's answer.
	SyncDelivery DeliveryMode = iota
	// AsyncDelivery claims the event and stores its request in one store
	// step, answers the sender at once, and leaves the delivery to the
	// background workers, which retry until the app answers 2xx.
	AsyncDelivery
)

// String returns the mode's name in DELIVERY: "sync" or "async".
func (m DeliveryMode) String() string {
	if m == AsyncDelivery {
		return "async"
	}
	return "sync"
}

// UnmarshalText parses "sync" or "async".
func (m *DeliveryMode) UnmarshalText(text []byte) error {
	switch string(text) {
	case "sync":
		*m = SyncDelivery
	case "async":
		*m = AsyncDelivery
	default:
		return fmt.Errorf("must be sync or async, got %q", text)
	}
	return nil
}
