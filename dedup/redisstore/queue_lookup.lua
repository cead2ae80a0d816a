-- Returns {fields, pttl, now, head} of the async record KEYS[1], or nil:
-- head is the head of its order key (ARGV[1] the hash tag, ARGV[2] the
-- event's key) when the event waits behind it, else empty.
local held = redis.call('HGETALL', KEYS[1])
if #held == 0 then
  return false
end
local t = redis.call('TIME')
local head = ''
local st = redis.call('HMGET', KEYS[1], 's', 'ok')
if st[1] == '3' and st[2] then
  head = redis.call('LINDEX', ARGV[1] .. '#ord:' .. st[2], 0) or ''
  if head == ARGV[2] then head = '' end
end
return {held, redis.call('PTTL', KEYS[1]), t[1] * 1000 + math.floor(t[2] / 1000), head}
