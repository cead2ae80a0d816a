-- After the consumer group was (re)created from the start of the stream,
-- puts back on the stream every open event whose entry is not there (lost
-- with the stream): KEYS[1] the stream, KEYS[2] the open events, KEYS[3]
-- the retries; ARGV[1] the hash tag. Returns how many were queued again.
local n = 0
for _, k in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local a = ARGV[1] .. k
  local s = redis.call('HGET', a, 's')
  local e = redis.call('HGET', a, 'e')
  -- Present only if the entry is this event's: a stream created again
  -- within the same millisecond can reuse an ID another event held.
  local entry = e and e ~= '' and redis.call('XRANGE', KEYS[1], e, e)[1]
  local present = entry and entry[2][2] == k
  local retrying = s == '3' and redis.call('ZSCORE', KEYS[3], k)
  if present or retrying then
    -- Delivered again from the stream, or from the retries.
  elseif s == '3' or s == '4' then
    -- A delivery under way stays its holder's (its token is unchanged,
    -- and Take skips it until its lease runs out); it settles the new
    -- entry.
    redis.call('HSET', a, 'e', redis.call('XADD', KEYS[1], '*', 'k', k))
    n = n + 1
  else
    redis.call('ZREM', KEYS[2], k)
  end
end
return n
