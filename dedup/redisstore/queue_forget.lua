-- Deletes an async event and takes it out of the queue, whatever its
-- state: KEYS as queue_settle.lua's, ARGV[1] the group, ARGV[2] the
-- event's key. Returns 1 if there was one, else 0.
local e = redis.call('HGET', KEYS[1], 'e')
if e and e ~= '' then
  redis.call('XACK', KEYS[3], ARGV[1], e)
  redis.call('XDEL', KEYS[3], e)
end
redis.call('ZREM', KEYS[4], ARGV[2])
redis.call('ZREM', KEYS[5], ARGV[2])
redis.call('ZREM', KEYS[6], ARGV[2])
redis.call('DEL', KEYS[2])
return redis.call('DEL', KEYS[1])
