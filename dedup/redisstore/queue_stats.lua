-- Returns {open events, the oldest one's accepted ms or false, deliveries
-- held, dead letters, now}: KEYS[1] the stream, KEYS[2] the open events,
-- KEYS[3] the dead letters; ARGV[1] the group.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local held = 0
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1])
if type(p) == 'table' and not p.err then
  held = p[1]
end
return {redis.call('ZCARD', KEYS[2]), oldest[2] or false, held, redis.call('ZCARD', KEYS[3]), now}
