-- Returns {value, pttl} of KEYS[1], or nil when there is no record. One
-- script so the value and its TTL are read at the same instant.
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
return {v, redis.call('PTTL', KEYS[1])}
