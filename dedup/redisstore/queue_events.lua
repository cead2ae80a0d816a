-- Lists one page of the events listing (events.go): KEYS[1] the index it
-- reads (the open events by when accepted, the dead letters by when they
-- expire, the completed events by when completed). ARGV[1] the hash tag,
-- ARGV[2] the state listed ('queued', 'delivering', 'failed',
-- 'completed'), ARGV[3] and ARGV[4] the index's scores to read from and
-- to ('-inf', '(N' ...), ARGV[5] and ARGV[6] the cursor's score and key
-- (both empty on the first page), ARGV[7] the page's limit, ARGV[8] the
-- most entries to read, ARGV[9] the key prefix chosen, ARGV[10] and
-- ARGV[11] the failed times chosen (ms, inclusive, exclusive; empty: no
-- bound), for the dead letters, whose index is not by them. Returns
-- {{key, fields, pttl}..., next score, next key, now}: next empty on the
-- last page.
local tag, want = ARGV[1], ARGV[2]
local limit, budget, prefix = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local since, before = tonumber(ARGV[10]), tonumber(ARGV[11])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {}
local scanned = 0
local last_score, last_key = ARGV[5], ARGV[6]

-- chosen is the record of key, read, if the page lists it.
local function chosen(k)
  if string.sub(k, 1, #prefix) ~= prefix then
    return nil
  end
  local rec = tag .. k
  local f = redis.call('HMGET', rec, 's', 'n')
  local s, n = f[1], tonumber(f[2] or '0')
  local state
  if s == '3' or (s == '4' and n <= now) then
    state = 'queued'
  elseif s == '4' then
    state = 'delivering'
  elseif s == '5' then
    state = 'failed'
    if (since and n < since) or (before and n >= before) then
      return nil
    end
  elseif s == '2' then
    state = 'completed'
  end
  if state ~= want then
    return nil
  end
  return {k, redis.call('HGETALL', rec), redis.call('PTTL', rec)}
end

-- visit reads the entry k at score; true when the page is done.
local function visit(k, score)
  if scanned == budget then
    return true
  end
  scanned = scanned + 1
  local ev = chosen(k)
  if ev then
    if #out == limit then
      return true -- one more: the page ends before it
    end
    table.insert(out, ev)
  end
  last_score, last_key = score, k
  return false
end

local function finish(more)
  if not more then
    last_score, last_key = '', ''
  end
  table.insert(out, last_score)
  table.insert(out, last_key)
  table.insert(out, now)
  return out
end

local from = ARGV[3]
if ARGV[5] ~= '' then
  -- The cursor's own score first: its ties after its key (Redis orders
  -- them by member), then the scores above it.
  local ties = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[5], ARGV[5])
  for _, k in ipairs(ties) do
    if k > ARGV[6] and visit(k, ARGV[5]) then
      return finish(true)
    end
  end
  from = '(' .. ARGV[5]
end
local offset = 0
while true do
  local batch = redis.call('ZRANGEBYSCORE', KEYS[1], from, ARGV[4], 'WITHSCORES', 'LIMIT', offset, 100)
  if #batch == 0 then
    return finish(false)
  end
  offset = offset + #batch / 2
  for i = 1, #batch, 2 do
    if visit(batch[i], batch[i + 1]) then
      return finish(true)
    end
  end
end
