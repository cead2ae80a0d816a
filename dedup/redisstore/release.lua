-- Deletes KEYS[1] only if it is still in flight under the caller's token
-- (the record starts with ARGV[1] = tag + token).
-- Returns 1 when deleted, 0 when the claim is no longer the caller's.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
