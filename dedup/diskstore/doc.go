// Package diskstore is the embedded store on disk (DATA_DIR): records, and
// the async delivery queue, in one bbolt file under a directory, for one
// replica.
//
// Every claim, completion and queued event is committed and fsync'd before
// the call returns (writes arriving together share one commit and its
// fsyncs), so what a call reported done survives a crash of the process or
// a restart. Each operation is one bbolt transaction, atomic on its own.
// The file is locked: a second process opening it fails rather than share
// it, so the store is never shared by replicas. On a restart, the
// deliveries the previous process held are due at once (the lock proves no
// one holds them). Every operation is bounded by its timeout, so a stalled
// or full volume yields errors, not hangs; what no operation can undo is a
// write the kernel is already blocked in.
//
// Expired records are invisible at once and swept out in small batches.
// A file written before 0.4 is moved to the per-route layout when first
// opened, one way.
package diskstore
