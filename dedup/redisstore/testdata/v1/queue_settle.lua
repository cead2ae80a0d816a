-- Settles a delivery, if the caller still holds it: KEYS[1] the record,
-- KEYS[2] the request, KEYS[3] the stream, KEYS[4] the open events, KEYS[5]
-- the retries, KEYS[6] the dead letters. ARGV[1] the group, ARGV[2] the
-- event's key, ARGV[3] the delivery's token, ARGV[4] the outcome:
--   'succeed': ARGV[5] the completed result, ARGV[6] ttl ms, ARGV[7] status
--   'retry':   ARGV[5] due at ms, ARGV[6] status, ARGV[7] reason
--   'fail':    ARGV[5] keep ms, ARGV[6] status, ARGV[7] reason
-- Returns 1 when settled, 0 when the caller no longer holds the delivery.
-- A succeed that the caller already made (its answer lost) returns 1: the
-- completed record keeps the token that completed it.
local st = redis.call('HMGET', KEYS[1], 's', 'k', 'e')
if st[1] == '2' and st[2] == ARGV[3] and ARGV[4] == 'succeed' then
  return 1
end
if st[1] ~= '4' or st[2] ~= ARGV[3] then
  return 0
end
-- The entry leaves the pending list and the stream at once: the stream
-- is never trimmed, so it holds only events not yet settled.
redis.call('XACK', KEYS[3], ARGV[1], st[3])
redis.call('XDEL', KEYS[3], st[3])
redis.call('HDEL', KEYS[1], 'e', 'q')
local outcome = ARGV[4]
if outcome ~= 'succeed' then
  redis.call('HDEL', KEYS[1], 'k')
end
if outcome == 'succeed' then
  redis.call('HSET', KEYS[1], 's', 2, 'r', ARGV[5], 'ls', ARGV[7])
  redis.call('HDEL', KEYS[1], 'le', 'n')
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
elseif outcome == 'retry' then
  redis.call('HSET', KEYS[1], 's', 3, 'n', ARGV[5], 'ls', ARGV[6], 'le', ARGV[7])
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[2])
else
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  redis.call('HSET', KEYS[1], 's', 5, 'n', now, 'ls', ARGV[6], 'le', ARGV[7])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  redis.call('ZREM', KEYS[4], ARGV[2])
  -- Scored by when the dead letter expires, so expired ones are dropped
  -- from the index by score.
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[5]), ARGV[2])
end
return 1
