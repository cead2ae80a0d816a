-- Puts a dead-lettered event back in the queue as a new first attempt:
-- KEYS as queue_settle.lua's, ARGV[1] the event's key. Returns 1 when
-- done, 0 when there is no such async event, -1 when it is not failed.
local s = redis.call('HGET', KEYS[1], 's')
if not s or redis.call('EXISTS', KEYS[2]) == 0 then
  return s and -1 or 0
end
if s ~= '5' then
  return -1
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local id = redis.call('XADD', KEYS[3], '*', 'k', ARGV[1])
redis.call('HDEL', KEYS[1], 'ls', 'le')
redis.call('HSET', KEYS[1], 's', 3, 'a', 0, 't', now, 'n', now, 'e', id)
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
return 1
