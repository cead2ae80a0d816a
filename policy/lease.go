package policy

import "time"

// leaseMargin is how much longer than a request to the app a claim is
// held by default.
const leaseMargin = 15 * time.Second

// DefaultLease is LEASE_TTL's default for requests to the app that take at
// most timeout: longer, so that a claim can only expire while the app is
// still working if the proxy holding it died. Sync claims and async
// deliveries are held alike.
func DefaultLease(timeout time.Duration) time.Duration { return timeout + leaseMargin }
