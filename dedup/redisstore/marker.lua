-- Marks the sync key KEYS[1] of an async event with ARGV[1], so that a
-- sync claim of the same event finds it taken; without expiry while the
-- event is queued. Returns 1 when marked (or already marked), else
-- {value, pttl} of the sync record that holds the key.
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return 1
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  return 1
end
return {v, redis.call('PTTL', KEYS[1])}
