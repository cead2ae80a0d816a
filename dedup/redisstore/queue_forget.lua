-- Deletes an async event and takes it out of the queue, whatever its
-- state: KEYS as queue_settle.lua's, ARGV[1] the group, ARGV[2] the
-- event's key, ARGV[3] the hash tag. Returns 1 if there was one, else 0.
local tag = ARGV[3]
local st = redis.call('HMGET', KEYS[1], 'e', 'rt', 'ok')
local route = st[2] or ''
drop_entry(tag, ARGV[1], ARGV[2], route, st[1])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('ZREM', tag .. '#done', ARGV[2])
-- A retry is on its route's index, or, put there by the previous
-- version, on the empty route's.
redis.call('ZREM', lane_key(tag, 'retry', route), ARGV[2])
redis.call('ZREM', lane_key(tag, 'retry', ''), ARGV[2])
redis.call('DEL', KEYS[2])
local had = redis.call('DEL', KEYS[1])
leave(tag, ARGV[1], ARGV[2], st[3])
return had
