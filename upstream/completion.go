package upstream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Completion is what the record of a completed event keeps beyond the
// app's status and the body's fingerprint, and how the app's answer is
// read for it. Sync routes and async delivery complete through the one
// Completion, so a duplicate is answered alike whichever way its event
// went. The zero value keeps no response and the fingerprint only as far
// as the store keeps it by default.
type Completion struct {
	// ReplayResponse keeps the app's response body and its Content-Type,
	// for duplicates to be answered with (REPLAY_RESPONSE).
	ReplayResponse bool
	// ReplayMaxBytes is the largest response body kept for replay; a
	// larger one is not kept, and its duplicates get the plain duplicate
	// answer. If zero, no body is kept: only answers with an empty body
	// are replayed.
	ReplayMaxBytes int
	// BodyFingerprint records each completed body under a key of its own
	// as well (DEDUP_BODY_FINGERPRINT, RememberBody). That key is found
	// from the whole fingerprint, so the event's record keeps all of it:
	// the admin API's forget derives the body's key from it.
	BodyFingerprint bool
}

// Capture reads, with ReplayResponse, up to ReplayMaxBytes of a completing
// answer's body to keep for replay, and puts back in resp.Body a body that
// reads unchanged from its first byte, for the caller to hand on. It
// returns nil, keeping nothing, without ReplayResponse or when the body is
// larger than ReplayMaxBytes or breaks off: a duplicate then gets the
// plain duplicate answer rather than a truncated copy. An empty body is
// kept as an empty, non-nil slice.
func (c Completion) Capture(resp *http.Response) []byte {
	if !c.ReplayResponse {
		return nil
	}
	limit := c.ReplayMaxBytes
	kept, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(kept), resp.Body), resp.Body}
	if err != nil || len(kept) > limit {
		return nil
	}
	return kept // never nil (io.ReadAll): an empty body is kept as empty
}

// readCloser reads from one reader and closes another: a body partly read
// ahead, closed as the original.
type readCloser struct {
	io.Reader
	io.Closer
}

// Result is the record a completing answer leaves: its status, bodySum
// (the SHA-256 of the request body; zero when unknown) and, when replay
// holds a body Capture kept, that body with the answer's Content-Type.
func (c Completion) Result(status int, header http.Header, bodySum [32]byte, replay []byte) dedup.Result {
	res := dedup.Result{Status: status, Fingerprint: bodySum, FullFingerprint: c.BodyFingerprint}
	if replay != nil {
		res.ContentType, res.Body = header.Get("Content-Type"), replay
	}
	return res
}

// BodyStore is what recording a body takes of a store (dedup.Store).
type BodyStore interface {
	Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error)
	Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error
}

// RememberBody records res, an event's completion, under key, the key of
// its body (dedup.BodyKey), for ttl: a later event with the same body,
// whatever its ID, is then a duplicate. The key is claimed (for lease)
// before it is completed, so that of two events completing with one body
// the first keeps it; a body already recorded is left as it is. Only the
// event's own record has to be found from this one, so it keeps the
// fingerprint as the store does by default.
func RememberBody(ctx context.Context, st BodyStore, key string, res dedup.Result, lease, ttl time.Duration) error {
	c, _, err := st.Claim(ctx, key, lease)
	if err != nil {
		return fmt.Errorf("upstream: claiming the body's record %s: %w", key, err)
	}
	if c.Token == "" {
		return nil // already recorded by another event
	}
	res.FullFingerprint = false // its key holds the whole one
	if err := st.Complete(ctx, c, res, ttl); err != nil {
		return fmt.Errorf("upstream: completing the body's record %s: %w", key, err)
	}
	return nil
}
