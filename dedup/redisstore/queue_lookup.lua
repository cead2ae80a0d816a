-- Returns {fields, pttl, now} of the async record KEYS[1], or nil.
local held = redis.call('HGETALL', KEYS[1])
if #held == 0 then
  return false
end
local t = redis.call('TIME')
return {held, redis.call('PTTL', KEYS[1]), t[1] * 1000 + math.floor(t[2] / 1000)}
