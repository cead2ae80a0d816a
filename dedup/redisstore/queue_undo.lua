-- Takes back an enqueue that too few replicas acknowledged, if the event
-- is still as queued: KEYS as queue_settle.lua's, ARGV[1] the group,
-- ARGV[2] the event's key, ARGV[3] the enqueue's token.
if redis.call('HGET', KEYS[1], 'q') ~= ARGV[3] or redis.call('HGET', KEYS[1], 's') ~= '3' then
  return 0
end
local e = redis.call('HGET', KEYS[1], 'e')
redis.call('XACK', KEYS[3], ARGV[1], e)
redis.call('XDEL', KEYS[3], e)
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('DEL', KEYS[1], KEYS[2])
return 1
