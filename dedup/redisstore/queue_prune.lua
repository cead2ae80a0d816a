-- Deletes from the group ARGV[1] of the stream KEYS[1] the consumers that
-- hold no pending delivery and have been idle for ARGV[2] ms, except
-- ARGV[3] (the caller). Every process reads under a name of its own, so
-- without this the group would list every process that ever ran. One
-- with deliveries pending is never deleted: that would drop them.
-- Returns how many were deleted.
local n = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    n = n + 1
  end
end
return n
