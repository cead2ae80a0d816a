-- Hands out at most ARGV[3] due deliveries, leased for ARGV[4] ms to the
-- consumer ARGV[2] of the group ARGV[1]. KEYS[1] is the stream, KEYS[2]
-- the retries not yet due, KEYS[3] where XAUTOCLAIM's cursor is kept.
-- ARGV[5] is the hash tag every event key is named under, ARGV[6..] one
-- fresh token per delivery. Returns {key, entry ID, token, attempt,
-- accepted ms, request} for each delivery.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local tag = ARGV[5]

-- Retries whose time has come go back onto the stream.
for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, n)) do
  redis.call('ZREM', KEYS[2], k)
  local a = tag .. k
  if redis.call('HGET', a, 's') == '3' then
    redis.call('HSET', a, 'e', redis.call('XADD', KEYS[1], '*', 'k', k))
  end
end

local entries = {}
-- Deliveries whose holder went quiet for a lease: taken over. The cursor
-- walks the pending list across calls, so a long one is covered in turn.
local cursor = redis.call('GET', KEYS[3]) or '0-0'
local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], lease, cursor, 'COUNT', n)
if claimed[1] ~= cursor then
  redis.call('SET', KEYS[3], claimed[1])
end
for _, e in ipairs(claimed[2]) do
  if e then table.insert(entries, e) end
end
-- Then entries no one was given yet.
if #entries < n then
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', n - #entries, 'STREAMS', KEYS[1], '>')
  if r then
    for _, e in ipairs(r[1][2]) do table.insert(entries, e) end
  end
end

local out = {}
for _, e in ipairs(entries) do
  local id, fields = e[1], e[2]
  local k = fields and fields[2]
  local st = k and redis.call('HMGET', tag .. k, 's', 'e', 'a', 't', 'n')
  if not st or (st[1] ~= '3' and st[1] ~= '4') or st[2] ~= id then
    -- An entry its record no longer points to (forgotten, settled,
    -- queued again under a new entry): drop it, so the pending list
    -- and the stream hold only live deliveries.
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
  elseif st[1] == '3' or tonumber(st[5]) <= now then
    local attempt = tonumber(st[3]) + 1
    local tok = ARGV[6 + #out]
    redis.call('HSET', tag .. k, 's', 4, 'a', attempt, 'k', tok, 'n', now + lease)
    table.insert(out, {k, id, tok, attempt, st[4], redis.call('GET', tag .. '#req:' .. k) or ''})
  end
  -- Else a holder with a longer lease than this caller's still has it.
end
return out
