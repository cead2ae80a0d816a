-- Returns {open events, the oldest one's accepted ms or false, deliveries
-- held, dead letters, now, depth by route}: KEYS[1] the empty route's stream, KEYS[2] the
-- set of the other routes, KEYS[3] the open events, KEYS[4] the dead
-- letters; ARGV[1] the group, ARGV[2] the hash tag.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
-- Each route's depth: the entries on its stream not handed out, and its
-- retries (a retrying event's entry left the stream when it was settled),
-- as {route, depth, ...} for the routes with any.
local by_route = {}
local routes = redis.call('SMEMBERS', KEYS[2])
table.insert(routes, 1, '')
for _, r in ipairs(routes) do
  local stream = lane_key(ARGV[2], 'stream', r)
  local n = redis.call('XLEN', stream) + redis.call('ZCARD', lane_key(ARGV[2], 'retry', r))
  local p = redis.pcall('XPENDING', stream, ARGV[1])
  if type(p) == 'table' and not p.err then
    n = n - p[1]
  end
  if n > 0 then
    table.insert(by_route, r)
    table.insert(by_route, n)
  end
end
return {redis.call('ZCARD', KEYS[3]), oldest[2] or false, held_deliveries(ARGV[2], ARGV[1]), redis.call('ZCARD', KEYS[4]), now, by_route}
