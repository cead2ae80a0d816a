-- Deletes from the group ARGV[1] of every route's stream (KEYS[1] the
-- empty route's, KEYS[2] the set of the other routes) the consumers that
-- hold no pending delivery and have been idle for ARGV[2] ms, except
-- ARGV[3] (the caller). ARGV[4] is the hash tag. Every process reads
-- under a name of its own, so without this each group would list every
-- process that ever ran. One with deliveries pending is never deleted:
-- that would drop them. Returns how many were deleted.
local n = 0
for _, stream in ipairs(every_stream(ARGV[4])) do
  local consumers = redis.pcall('XINFO', 'CONSUMERS', stream, ARGV[1])
  if type(consumers) == 'table' and not consumers.err then
    for _, c in ipairs(consumers) do
      local f = {}
      for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
      if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
        redis.call('XGROUP', 'DELCONSUMER', stream, ARGV[1], f['name'])
        n = n + 1
      end
    end
  end
end
return n
