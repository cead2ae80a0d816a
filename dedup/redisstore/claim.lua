-- Claims KEYS[1] with the in-flight record ARGV[1] for ARGV[2] milliseconds.
-- Returns 1 when the caller now owns the key, or {value, pttl} of the record
-- that already holds it. One script so that claim is one round trip on Redis
-- 6 and 7 (SET NX GET needs 7) and single-key, so it runs on a cluster.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local v = redis.call('GET', KEYS[1])
-- The value holds a fresh random token, so finding it means this is the
-- client retrying a claim whose first attempt took the key but whose answer
-- was lost: the caller owns it.
if v == ARGV[1] then
  return 1
end
return {v, redis.call('PTTL', KEYS[1])}
