-- Settles a delivery, if the caller still holds it: KEYS[1] the record,
-- KEYS[2] the request, KEYS[3] the open events, KEYS[4] the dead letters.
-- ARGV[1] the group, ARGV[2] the event's key, ARGV[3] the delivery's
-- token, ARGV[4] the hash tag, ARGV[5] the outcome:
--   'succeed': ARGV[6] the completed result, ARGV[7] ttl ms, ARGV[8] status
--   'retry':   ARGV[6] due at ms, ARGV[7] status, ARGV[8] reason,
--              ARGV[9] the route of the delivery's request
--   'fail':    ARGV[6] keep ms, ARGV[7] status, ARGV[8] reason
-- ARGV[10] the attempt's line for the event's history ('' for none; the
-- history field h keeps the newest ARGV[11] lines).
-- On one server, KEYS[5] is the event's sync key and ARGV[12] the async
-- marker it holds: a succeed or a fail gives the marker its record's
-- lifetime in the same step, as marker_expire.lua would in a round trip
-- of its own (which a cluster, where the sync key is in another slot,
-- still makes). Without KEYS[5] the marker is left alone.
-- Returns 1 when settled, 2 when failed and kept without expiry (a dead
-- letter that holds its order key), 0 when the caller no longer holds the
-- delivery.
-- A succeed that the caller already made (its answer lost) returns 1: the
-- completed record keeps the token that completed it.
local tag = ARGV[4]
-- mark gives the marker the lifetime ms (nil: none), if the sync key
-- still holds it.
local function mark(ms)
  if not KEYS[5] or redis.call('GET', KEYS[5]) ~= ARGV[12] then
    return
  end
  if ms then
    redis.call('PEXPIRE', KEYS[5], ms)
  else
    redis.call('PERSIST', KEYS[5])
  end
end
local st = redis.call('HMGET', KEYS[1], 's', 'k', 'e', 'rt', 'ok', 'ob', 'h')
if st[1] == '2' and st[2] == ARGV[3] and ARGV[5] == 'succeed' then
  return 1
end
if st[1] ~= '4' or st[2] ~= ARGV[3] then
  return 0
end
-- The entry leaves the pending list and the stream at once: the streams
-- are never trimmed, so they hold only events not yet settled.
drop_entry(tag, ARGV[1], ARGV[2], st[4] or '', st[3])
local outcome = ARGV[5]
-- Each outcome's fields go in one HDEL and one HSET (set, with the
-- history line, if any).
local set = {}
if ARGV[10] ~= '' then
  local lines = {}
  for line in string.gmatch(st[7] or '', '[^\n]+') do
    table.insert(lines, line)
  end
  table.insert(lines, ARGV[10])
  while #lines > tonumber(ARGV[11]) do
    table.remove(lines, 1)
  end
  set = {'h', table.concat(lines, '\n')}
end
local function write(...)
  for _, v in ipairs({...}) do
    table.insert(set, v)
  end
  redis.call('HSET', KEYS[1], unpack(set))
end
if outcome == 'succeed' then
  redis.call('HDEL', KEYS[1], 'e', 'q', 'le', 'n')
  write('s', 2, 'r', ARGV[6], 'ls', ARGV[8])
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[2])
  leave(tag, ARGV[1], ARGV[2], st[5])
  -- The completed events' index (events.go), by when completed; its
  -- oldest entries whose record expired go as new ones come.
  local done = tag .. '#done'
  for _, k in ipairs(redis.call('ZRANGE', done, 0, 1)) do
    if redis.call('HGET', tag .. k, 's') ~= '2' then
      redis.call('ZREM', done, k)
    end
  end
  redis.call('ZADD', done, now_ms(), ARGV[2])
  mark(ARGV[7])
elseif outcome == 'retry' then
  -- Due again in its route's lane. A record the previous version wrote
  -- has no route (its events are the empty route's lane): it takes its
  -- request's, so its first retry moves it to its own lane.
  local route = st[4] or ARGV[9]
  redis.call('HDEL', KEYS[1], 'e', 'q', 'k')
  if route ~= '' then
    write('s', 3, 'n', ARGV[6], 'ls', ARGV[7], 'le', ARGV[8], 'rt', route)
  else
    write('s', 3, 'n', ARGV[6], 'ls', ARGV[7], 'le', ARGV[8])
  end
  open_lane(tag, ARGV[1], route)
  redis.call('ZADD', lane_key(tag, 'retry', route), ARGV[6], ARGV[2])
else
  local now = now_ms()
  redis.call('HDEL', KEYS[1], 'e', 'q', 'k')
  write('s', 5, 'n', now, 'ls', ARGV[7], 'le', ARGV[8])
  redis.call('ZREM', KEYS[3], ARGV[2])
  if st[5] and st[6] == '1' then
    -- It holds its order key (ORDER_ON_FAILURE=block): kept until it is
    -- requeued or forgotten, as expiring would let the key go on unseen.
    -- Listed after every dead letter that expires.
    redis.call('ZADD', KEYS[4], now + 100 * 365 * 86400000, ARGV[2])
    mark(nil)
    return 2
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  -- Scored by when the dead letter expires, so expired ones are dropped
  -- from the index by score.
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), ARGV[2])
  leave(tag, ARGV[1], ARGV[2], st[5])
  mark(ARGV[6])
end
return 1
