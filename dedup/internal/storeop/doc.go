// Package storeop holds what every store checks the same way before it
// touches its data: a live context, positive leases and TTLs, well-formed
// tokens, and that the key prefix belongs to this app (Owner), so that the
// stores agree on their errors.
//
// It performs no store operation and keeps nothing itself, except whether
// an owner check has passed.
package storeop
