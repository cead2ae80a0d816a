-- Accepts an async event on one server (a standalone Redis, or the master
-- Sentinels name) in one step: marks its sync key KEYS[4] with the marker
-- ARGV[10], as marker.lua does, and enqueues it (enqueue: KEYS[1..3],
-- ARGV[1..9]). The sync key is in another hash slot than the queue's
-- keys, which only one node allows; on a cluster the two steps are two
-- scripts. Returns what enqueue returns, or {value, pttl} of the sync
-- record that holds the key (two values, where an async record's answer
-- has three). The marker ends as the two steps leave it: taken back when
-- the queue is full, given the async record's lifetime when one already
-- holds the key.
local marker = ARGV[10]
if not redis.call('SET', KEYS[4], marker, 'NX') then
  local v = redis.call('GET', KEYS[4])
  if v ~= marker then
    return {v, redis.call('PTTL', KEYS[4])}
  end
end
local r = enqueue()
if r == 0 then
  redis.call('DEL', KEYS[4])
elseif type(r) == 'table' and r[2] > 0 then
  redis.call('PEXPIRE', KEYS[4], r[2])
end
return r
