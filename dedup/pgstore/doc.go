// Package pgstore keeps the records, and the async delivery queue, in
// PostgreSQL tables, shared by every replica.
//
// Each operation is one SQL statement or one transaction, so it is atomic,
// and durable as the database's commit is: with the server's default
// settings, what a call reported done survives a restart or a crash of the
// process and of the database. Workers on every replica are woken by
// LISTEN/NOTIFY when an event is queued. Expired rows are invisible at once
// and deleted in batches every PruneInterval (if set).
//
// The store creates its tables and indexes when they are missing
// (Migrate, or at open with AutoMigrate). It cannot keep what the database
// itself loses: committed transactions lost with fsync off, or by a
// promoted replica that had not received them.
package pgstore
