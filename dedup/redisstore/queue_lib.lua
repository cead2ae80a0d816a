-- What the queue's scripts share (redisqueue.go puts it before each one
-- that uses it): the names of a route's keys, adding an event to its
-- route's stream, finding the stream an event's entry is on, and counting
-- the deliveries under way.

-- now_ms is the server's clock in ms: every lease and due time is on it,
-- whichever replica asks.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- lane_key names the stream, retries or cursor ('stream', 'retry',
-- 'cursor') of route's lane. The empty route's are the names the previous
-- version gave the whole queue, so what it queued is that lane's.
local function lane_key(tag, kind, route)
  if route == '' then
    return tag .. '#' .. kind
  end
  return tag .. '#' .. kind .. ':' .. route
end

-- open_lane makes route's lane one that Take draws on, before anything
-- is put in it: a route new to the set of routes gets its stream and its
-- consumer group here, in the same script, so a Take never finds a
-- route's stream without its group unless Redis lost it. The empty
-- route's group is the one Take checks for to tell that Redis lost the
-- queue: only the recovery (queue_recover.lua) creates it.
local function open_lane(tag, group, route)
  if route ~= '' and redis.call('SADD', tag .. '#routes', route) == 1 then
    -- BUSYGROUP if the stream outlived its set entry: keep that group.
    redis.pcall('XGROUP', 'CREATE', lane_key(tag, 'stream', route), group, '0', 'MKSTREAM')
  end
end

-- add_entry puts key's event on route's stream and returns the new
-- entry's ID.
local function add_entry(tag, group, key, route)
  open_lane(tag, group, route)
  return redis.call('XADD', lane_key(tag, 'stream', route), '*', 'k', key)
end

-- entry_stream is the stream on which the entry id is key's: its route's,
-- or the empty route's, where a process of the previous version (during
-- a rolling upgrade) puts back what it retries, requeues or recovers. Nil
-- if neither holds it. Checked rather than assumed because an ID is only
-- unique within one stream: acking or deleting it on another stream would
-- drop another event's entry.
local function entry_stream(tag, key, route, id)
  if not id or id == '' then
    return nil
  end
  local streams = {lane_key(tag, 'stream', route)}
  if route ~= '' then
    table.insert(streams, tag .. '#stream')
  end
  for _, stream in ipairs(streams) do
    local e = redis.call('XRANGE', stream, id, id)[1]
    if e and e[2] and e[2][2] == key then
      return stream
    end
  end
  return nil
end

-- drop_entry takes key's entry id off its stream and its pending list,
-- wherever entry_stream finds it.
local function drop_entry(tag, group, key, route, id)
  local stream = entry_stream(tag, key, route, id)
  if stream then
    redis.call('XACK', stream, group, id)
    redis.call('XDEL', stream, id)
  end
end

-- every_stream lists the empty route's stream and the stream of every
-- route in the set.
local function every_stream(tag)
  local streams = {tag .. '#stream'}
  for _, r in ipairs(redis.call('SMEMBERS', tag .. '#routes')) do
    table.insert(streams, lane_key(tag, 'stream', r))
  end
  return streams
end


-- held_deliveries counts the deliveries taken and not settled: the
-- pending lists of every route's stream, one XPENDING summary each,
-- whatever the backlog. The queue's depth (what waits for delivery) is
-- the open events less these.
local function held_deliveries(tag, group)
  local held = 0
  for _, stream in ipairs(every_stream(tag)) do
    local p = redis.pcall('XPENDING', stream, group)
    if type(p) == 'table' and not p.err then
      held = held + p[1]
    end
  end
  return held
end

-- Ordered events (an order key, the record's field ok): each holds a
-- place in its key's list, {tag}#ord:<key>, from its enqueue until it
-- completes, is forgotten, or is dead-lettered without blocking (field
-- ob '1' keeps a dead letter at the head). Only the head is ever on a
-- stream or among the retries; an event behind it has no entry and its
-- 'n' is WAITING until the head's leaving puts it on its route's stream
-- (promote), in the script that settles the head.
local WAITING = '9223372036854775807'

local function order_list(tag, ok)
  return tag .. '#ord:' .. ok
end

-- promote puts the head of ok's list on its route's stream if it waits.
local function promote(tag, group, ok)
  local head = redis.call('LINDEX', order_list(tag, ok), 0)
  if not head then
    return
  end
  local a = tag .. head
  local st = redis.call('HMGET', a, 's', 'n', 'rt')
  if st[1] == '3' and st[2] == WAITING then
    redis.call('HSET', a, 'n', now_ms(), 'e', add_entry(tag, group, head, st[3] or ''))
  end
end

-- join gives key a place at the end of ok's list and reports whether it
-- is the head.
local function join(tag, ok, key)
  return redis.call('RPUSH', order_list(tag, ok), key) == 1
end

-- leave takes key out of its place in ok's list (none if ok is false),
-- and puts the next event on its stream if key was the head.
local function leave(tag, group, key, ok)
  if not ok or ok == '' then
    return
  end
  local list = order_list(tag, ok)
  local head = redis.call('LINDEX', list, 0) == key
  redis.call('LREM', list, 1, key)
  if head then
    promote(tag, group, ok)
  end
end
