package dedup

import (
	"encoding/hex"
	"strings"
)

// EventKey is the store key of an event ID: the prefix, the namespace (a
// preset's name or a route's path), ":" and the ID.
func EventKey(prefix, namespace, id string) string {
	return prefix + namespace + ":" + id
}

// SplitEventKey undoes EventKey. When the namespace is known (a queued
// request keeps it), the ID is what follows it; otherwise (namespace
// empty, or not the key's) the namespace ends at the first ':' after the
// prefix: preset names carry none and route paths hardly ever do, while
// IDs may. A key with none (which the proxy never writes) is all ID.
func SplitEventKey(prefix, namespace, key string) (ns, id string) {
	rest := strings.TrimPrefix(key, prefix)
	if namespace != "" {
		if id, ok := strings.CutPrefix(rest, namespace+":"); ok {
			return namespace, id
		}
	}
	if ns, id, ok := strings.Cut(rest, ":"); ok {
		return ns, id
	}
	return "", rest
}

// BodyKey is the store key of a body fingerprint (DEDUP_BODY_FINGERPRINT).
// '#' never occurs in a namespace, so it cannot collide with an event key.
func BodyKey(prefix, namespace string, fingerprint [32]byte) string {
	return prefix + namespace + "#sha256:" + hex.EncodeToString(fingerprint[:])
}
