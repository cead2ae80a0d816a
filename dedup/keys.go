package dedup

import "encoding/hex"

// EventKey is the store key of an event ID: the prefix, the namespace (a
// preset's name or a route's path), ":" and the ID.
func EventKey(prefix, namespace, id string) string {
	return prefix + namespace + ":" + id
}

// BodyKey is the store key of a body fingerprint (DEDUP_BODY_FINGERPRINT).
// '#' never occurs in a namespace, so it cannot collide with an event key.
func BodyKey(prefix, namespace string, fingerprint [32]byte) string {
	return prefix + namespace + "#sha256:" + hex.EncodeToString(fingerprint[:])
}
