// Package codec is the binary form the stores write their values in: the
// in-flight and completed records, async records, queued requests, and
// claim tokens, so that every store writes and reads back the same bytes.
//
// Decoding never trusts its input: a value it cannot read is an error
// wrapping ErrBadRecord, never a panic. Older request versions are still
// read, so a queue written by an earlier release survives an upgrade. The
// package knows nothing of where the bytes are kept.
package codec
