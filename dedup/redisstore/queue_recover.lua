-- After a Take found a consumer group missing (Redis lost data, or a hand
-- deleted a key), creates every missing group from the start of its
-- stream, and puts back on its route's stream every open event whose
-- entry is gone: KEYS[1] the empty route's stream, KEYS[2] the set of the
-- other routes, KEYS[3] the open events; ARGV[1] the group, ARGV[2] the
-- hash tag. Returns {groups created, events queued again}.
local group, tag = ARGV[1], ARGV[2]
local created = 0
for _, stream in ipairs(every_stream(tag)) do
  local ok = redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  if type(ok) ~= 'table' or not ok.err then
    created = created + 1
  end
end
local n = 0
for _, k in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local a = tag .. k
  local st = redis.call('HMGET', a, 's', 'e', 'rt', 'n')
  local route = st[3] or ''
  -- Present only if the entry is this event's: a stream created again
  -- within the same millisecond can reuse an ID another event held.
  local present = entry_stream(tag, k, route, st[2])
  local retrying = st[1] == '3' and (redis.call('ZSCORE', lane_key(tag, 'retry', route), k) or
    redis.call('ZSCORE', lane_key(tag, 'retry', ''), k))
  if present or retrying or st[4] == WAITING then
    -- Delivered again from the stream, or from the retries; or it waits
    -- behind the head of its order key, which puts it on its stream.
  elseif st[1] == '3' or st[1] == '4' then
    -- A delivery under way stays its holder's (its token is unchanged,
    -- and Take skips it until its lease runs out); it settles the new
    -- entry.
    redis.call('HSET', a, 'e', add_entry(tag, group, k, route))
    n = n + 1
  else
    redis.call('ZREM', KEYS[3], k)
  end
end
return {created, n}
