-- Returns {open events, the oldest one's accepted ms or false, deliveries
-- held, dead letters, now}: KEYS[1] the empty route's stream, KEYS[2] the
-- set of the other routes, KEYS[3] the open events, KEYS[4] the dead
-- letters; ARGV[1] the group, ARGV[2] the hash tag. The held deliveries
-- are the pending lists of every route's stream: one XPENDING summary
-- each, whatever the backlog.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local held = 0
for _, stream in ipairs(every_stream(ARGV[2])) do
  local p = redis.pcall('XPENDING', stream, ARGV[1])
  if type(p) == 'table' and not p.err then
    held = held + p[1]
  end
end
return {redis.call('ZCARD', KEYS[3]), oldest[2] or false, held, redis.call('ZCARD', KEYS[4]), now}
