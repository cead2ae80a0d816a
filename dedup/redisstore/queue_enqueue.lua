-- enqueue claims an async event and queues its request on its route's
-- stream, atomically: KEYS[1] the event's record (a hash), KEYS[2] its
-- request, KEYS[3] the index of open events. ARGV[1] is the event's key,
-- ARGV[2] the request, ARGV[3] a fresh random token, ARGV[4] the route
-- the event was accepted on, ARGV[5] the hash tag, ARGV[6] the consumer
-- group, ARGV[7] the most events that may wait for delivery (0: no
-- bound), ARGV[8] the event's order key (empty: none) and ARGV[9] '1' if
-- its dead letter blocks the key. Every key shares one hash slot. Returns
-- the new stream entry's ID when the caller won (empty when the event
-- waits behind the head of its order key), {fields, pttl, now} of the
-- record that already holds the key, or 0 when the key is free but the
-- queue full. The script that runs it ends with a call to it: "return
-- enqueue()" on a cluster, queue_accept.lua on one server.
local function enqueue()
  local now = now_ms()
  local held = redis.call('HGETALL', KEYS[1])
  if #held > 0 then
    -- Finding the caller's own token means this is the client retrying an
    -- enqueue whose answer was lost: the caller won.
    if redis.call('HGET', KEYS[1], 'q') == ARGV[3] then
      return redis.call('HGET', KEYS[1], 'e') or ''
    end
    return {held, redis.call('PTTL', KEYS[1]), now}
  end
  local max_depth = tonumber(ARGV[7])
  if max_depth > 0 then
    -- The depth as Stats counts it, in the step that adds to it: exact,
    -- whichever replica asks. The open events alone are a bound on it (one
    -- ZCARD), so the deliveries under way are counted only near the bound.
    local open = redis.call('ZCARD', KEYS[3])
    if open >= max_depth and open - held_deliveries(ARGV[5], ARGV[6]) >= max_depth then
      return 0
    end
  end
  local route = ARGV[4]
  local ok = ARGV[8]
  -- The record's fields, written in one HSET.
  local fields = {'s', 3, 'a', 0, 't', now, 'q', ARGV[3]}
  if ok ~= '' then
    table.insert(fields, 'ok')
    table.insert(fields, ok)
    table.insert(fields, 'ob')
    table.insert(fields, ARGV[9])
  end
  if route ~= '' then
    -- The lane a retry, a takeover or a requeue goes back to. None for the
    -- empty route, as in the records the previous version wrote.
    table.insert(fields, 'rt')
    table.insert(fields, route)
  end
  local id = ''
  table.insert(fields, 'n')
  if ok == '' or join(ARGV[5], ok, ARGV[1]) then
    id = add_entry(ARGV[5], ARGV[6], ARGV[1], route)
    table.insert(fields, now)
    table.insert(fields, 'e')
    table.insert(fields, id)
  else
    table.insert(fields, WAITING)
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  return id
end
