-- Puts a dead-lettered event back in its route's lane as a new first
-- attempt: KEYS as queue_settle.lua's, ARGV[1] the event's key, ARGV[2]
-- the hash tag, ARGV[3] the group. Returns 1 when done, 0 when there is
-- no such async event, -1 when it is not failed.
local s = redis.call('HGET', KEYS[1], 's')
if not s or redis.call('EXISTS', KEYS[2]) == 0 then
  return s and -1 or 0
end
if s ~= '5' then
  return -1
end
local now = now_ms()
redis.call('HDEL', KEYS[1], 'ls', 'le', 'e')
-- An ordered dead letter that left its key takes a place at the end of
-- it; one that holds its place (at the head, blocking) keeps it.
local ok = redis.call('HGET', KEYS[1], 'ok')
local head = true
if ok then
  head = redis.call('LINDEX', order_list(ARGV[2], ok), 0) == ARGV[1] or join(ARGV[2], ok, ARGV[1])
end
if head then
  local id = add_entry(ARGV[2], ARGV[3], ARGV[1], redis.call('HGET', KEYS[1], 'rt') or '')
  redis.call('HSET', KEYS[1], 's', 3, 'a', 0, 't', now, 'n', now, 'e', id)
else
  redis.call('HSET', KEYS[1], 's', 3, 'a', 0, 't', now, 'n', WAITING)
end
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return 1
