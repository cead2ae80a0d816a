-- Hands out at most ARGV[3] due deliveries of one lane, leased for
-- ARGV[4] ms to the consumer ARGV[2] of the group ARGV[1]. KEYS[1] is the
-- empty route's stream (the previous version's only one), KEYS[2] the set
-- of the other routes that have a stream, KEYS[3] the fence: a sorted set
-- of the take IDs of lost Takes, by when the mark may go. ARGV[5] is the
-- hash tag every key is named under. The lane: ARGV[6] 'route', with
-- ARGV[7] its route; or 'rest', with ARGV[7] where to start the round of
-- its routes. Then ARGV[8] the number E of routes the rest lane leaves out
-- and those routes; then this call's take ID; then a number L and the L
-- take IDs of this consumer's Takes whose answer was lost, and a number R
-- and the R tokens they were given; then one fresh token per delivery.
-- Returns {{key, entry ID, token, attempt, accepted ms, request}...,
-- gone}, gone 1 when a consumer group Take needs is missing (Redis lost
-- the queue).
local group, consumer = ARGV[1], ARGV[2]
local n = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local tag = ARGV[5]
local e = tonumber(ARGV[8])
local take_at = 9 + e

-- A Take whose answer was lost and that a later Take fenced (below) runs
-- no further: it would lease deliveries under tokens no one will present
-- again. The one command a Take without lost Takes adds: a read.
if redis.call('ZSCORE', KEYS[3], ARGV[take_at]) then
  return {{}, 0}
end

local now = now_ms()
local gone = 0

-- The empty route's group exists from the first Take on: only a Redis
-- that lost data (or a hand that deleted it) can be without it.
local anchored = false
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) == 'table' and not groups.err then
  for _, g in ipairs(groups) do
    for i = 1, #g, 2 do
      if g[i] == 'name' and g[i + 1] == group then anchored = true end
    end
  end
end
if not anchored then gone = 1 end

-- The lane's routes. A route other than the empty one has a stream only
-- while it is in the set.
local routes = {}
if ARGV[6] == 'route' then
  routes = {ARGV[7]}
else
  local except = {}
  for i = 1, e do except[ARGV[8 + i]] = true end
  local all = redis.call('SMEMBERS', KEYS[2])
  -- Sorted, so that the round's start moves along one order.
  table.sort(all)
  if not except[''] then table.insert(routes, '') end
  for _, r in ipairs(all) do
    if not except[r] then table.insert(routes, r) end
  end
  -- Each rest Take starts its round one route further, so that a route
  -- with much due does not always go first.
  local start = #routes > 0 and tonumber(ARGV[7]) % #routes or 0
  local turned = {}
  for i = 1, #routes do turned[i] = routes[(start + i - 1) % #routes + 1] end
  routes = turned
end
local function present(r)
  if r == '' then return anchored end
  -- The rest lane's routes come from the set.
  return ARGV[6] == 'rest' or redis.call('SISMEMBER', KEYS[2], r) == 1
end
local ids_at = take_at + 1
local ids_n = tonumber(ARGV[ids_at])
local lost_at = ids_at + ids_n + 1
local lost_n = tonumber(ARGV[lost_at])
local fresh = lost_at + lost_n + 1

local out = {}
local function hand_out(k, id, tok, attempt, accepted)
  table.insert(out, {k, id, tok, attempt, accepted, redis.call('GET', tag .. '#req:' .. k) or ''})
end

-- First, the Takes of this consumer whose answer never reached it. Each
-- is fenced: if its script has not run yet (queued on another connection
-- behind a stall), it leases nothing when it does. The mark is needed
-- only while such a Take can still be on its way, so the marks last a
-- lease (expired ones go here, and the whole set with the last of them).
if ids_n > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  for i = 1, ids_n do
    redis.call('ZADD', KEYS[3], now + lease, ARGV[ids_at + i])
  end
  if redis.call('PTTL', KEYS[3]) < lease then
    redis.call('PEXPIRE', KEYS[3], lease)
  end
end

-- Then what those that did run leased and still hold: found all at once,
-- so that their tokens need not be passed again. Up to n are handed out
-- again as they are (same token, same attempt), with the lease renewed
-- from now; the rest go back to their stream as they were before that
-- Take (the attempt it counted taken back), for the next Take at once.
-- This consumer's pending list holds only what it has leased, a few per
-- lane, so it is read whole.
if lost_n > 0 then
  local wanted = {}
  for i = 1, lost_n do wanted[ARGV[lost_at + i]] = true end
  for _, r in ipairs(routes) do
    local stream = lane_key(tag, 'stream', r)
    local from = '-'
    while present(r) do
      local page = redis.pcall('XPENDING', stream, group, from, '+', 100, consumer)
      if type(page) ~= 'table' or page.err then break end
      for _, p in ipairs(page) do
        local id = p[1]
        local entry = redis.call('XRANGE', stream, id, id)[1]
        local k = entry and entry[2] and entry[2][2]
        local a = k and tag .. k
        local st = k and redis.call('HMGET', a, 's', 'e', 'a', 't', 'k')
        if st and st[1] == '4' and st[2] == id and wanted[st[5]] then
          if #out < n then
            redis.call('HSET', a, 'n', now + lease)
            redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
            hand_out(k, id, st[5], tonumber(st[3]), st[4])
          else
            -- A lost Take leased it on its route's stream (r): it goes
            -- back there as a new entry, after those the search pages
            -- through.
            redis.call('XACK', stream, group, id)
            redis.call('XDEL', stream, id)
            redis.call('HDEL', a, 'k')
            redis.call('HSET', a, 's', 3, 'a', tonumber(st[3]) - 1, 'n', now, 'e', add_entry(tag, group, k, r))
          end
        end
        from = '(' .. id
      end
      if #page < 100 then break end
    end
  end
end

for _, r in ipairs(routes) do
  if #out >= n then break end
  if present(r) then
    local stream, retry, cursor_key = lane_key(tag, 'stream', r), lane_key(tag, 'retry', r), lane_key(tag, 'cursor', r)
    local want = n - #out

    -- Retries whose time has come go back onto their route's stream.
    for _, k in ipairs(redis.call('ZRANGEBYSCORE', retry, '-inf', now, 'LIMIT', 0, want)) do
      redis.call('ZREM', retry, k)
      local a = tag .. k
      local st = redis.call('HMGET', a, 's', 'rt')
      if st[1] == '3' then
        redis.call('HSET', a, 'e', add_entry(tag, group, k, st[2] or ''))
      end
    end

    local entries = {}
    -- Deliveries whose holder went quiet for a lease: taken over. The
    -- cursor walks the pending list across calls, so a long one is
    -- covered in turn. An error here (no group) writes nothing.
    local cursor = redis.call('GET', cursor_key) or '0-0'
    local claimed = redis.pcall('XAUTOCLAIM', stream, group, consumer, lease, cursor, 'COUNT', want)
    local failed = type(claimed) ~= 'table' or claimed.err
    if failed then
      gone = 1
    else
      if claimed[1] ~= cursor then
        redis.call('SET', cursor_key, claimed[1])
      end
      for _, en in ipairs(claimed[2]) do
        if en then table.insert(entries, en) end
      end
      -- Then entries no one was given yet.
      if #entries < want then
        local got = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want - #entries, 'STREAMS', stream, '>')
        if got then
          for _, en in ipairs(got[1][2]) do table.insert(entries, en) end
        end
      end
    end

    for _, en in ipairs(entries) do
      local id, fields = en[1], en[2]
      local k = fields and fields[2]
      local a = k and tag .. k
      local st = k and redis.call('HMGET', a, 's', 'e', 'a', 't', 'n', 'rt')
      if not st or (st[1] ~= '3' and st[1] ~= '4') or st[2] ~= id then
        -- An entry its record no longer points to (forgotten, settled,
        -- queued again under a new entry): drop it, so the pending list
        -- and the stream hold only live deliveries.
        redis.call('XACK', stream, group, id)
        redis.call('XDEL', stream, id)
      elseif st[1] == '4' and tonumber(st[5]) > now then
        -- A holder with a longer lease than this caller's still has it.
      elseif (st[6] or '') ~= r then
        -- Another route's event on this stream: put back there by a
        -- process of the previous version, which knows one stream only.
        -- It moves to its own lane (its lease, if any, over: as a
        -- takeover would, the move ends its holder's claim).
        redis.call('XACK', stream, group, id)
        redis.call('XDEL', stream, id)
        redis.call('HDEL', a, 'k')
        redis.call('HSET', a, 's', 3, 'e', add_entry(tag, group, k, st[6] or ''))
      else
        local attempt = tonumber(st[3]) + 1
        local tok = ARGV[fresh]
        fresh = fresh + 1
        redis.call('HSET', a, 's', 4, 'a', attempt, 'k', tok, 'n', now + lease)
        hand_out(k, id, tok, attempt, st[4])
      end
    end

    -- A route of the rest lane with nothing left (no longer configured,
    -- or not yet given a lane) leaves the set, its keys deleted, so that
    -- the rest lane's round does not grow with every route ever used.
    -- Its next event creates them again (add_entry).
    if r ~= '' and ARGV[6] == 'rest' and not failed and redis.call('XLEN', stream) == 0 and redis.call('ZCARD', retry) == 0 then
      redis.call('DEL', stream, retry, cursor_key)
      redis.call('SREM', KEYS[2], r)
    end
  end
end
return {out, gone}
