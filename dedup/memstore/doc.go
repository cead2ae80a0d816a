// Package memstore is the embedded store kept in this process's memory,
// the default when no store is configured: the same claim, complete,
// release and lookup semantics as every other store, each operation one
// atomic step under its shard's lock.
//
// It promises nothing past the process: every record is lost when the
// process exits, and duplicates are recognised only within one process, so
// it suits one replica only. It keeps no async queue (a 202 must survive a
// restart), so async routes need another store. Expired records are
// invisible at once; a janitor purges them every few seconds only to bound
// memory.
package memstore
