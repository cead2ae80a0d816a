// Package redisstore keeps the records, and the async delivery queue, in
// Redis (one server, a Redis Cluster, or a master found through Sentinels),
// shared by every replica.
//
// Each operation is one atomic step on the server: a Lua script (or a
// single command) that reads and writes one key, so sync records spread
// over a cluster's masters; an async event's record, request and queue
// entries live under one hash tag, so each queue script stays in one slot.
// Claims and completions are checked against the owner's token.
//
// What survives a restart is what Redis keeps: the store cannot make a
// Redis without persistence, or one that evicts, durable. It watches
// instead (Monitor): an evicting policy, evicted keys, running out of
// memory, a lost marker key, a restarted server that lost its keys, or a
// clock key gone back, each reported so that someone knows duplicates are
// possible; it cannot undo them. Replication is asynchronous unless
// WaitReplicas asks for a won claim and a completion to reach that many
// replicas before they are reported done.
package redisstore
