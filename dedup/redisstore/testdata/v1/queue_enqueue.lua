-- Claims an async event and queues its request, atomically: KEYS[1] the
-- event's record (a hash), KEYS[2] its request, KEYS[3] the stream, KEYS[4]
-- the index of open events. ARGV[1] is the event's key, ARGV[2] the
-- request, ARGV[3] a fresh random token. Every key shares one hash slot.
-- Returns the new stream entry's ID when the caller won, or
-- {fields, pttl, now} of the record that already holds the key.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local held = redis.call('HGETALL', KEYS[1])
if #held > 0 then
  -- Finding the caller's own token means this is the client retrying an
  -- enqueue whose answer was lost: the caller won.
  if redis.call('HGET', KEYS[1], 'q') == ARGV[3] then
    return redis.call('HGET', KEYS[1], 'e')
  end
  return {held, redis.call('PTTL', KEYS[1]), now}
end
local id = redis.call('XADD', KEYS[3], '*', 'k', ARGV[1])
redis.call('HSET', KEYS[1], 's', 3, 'a', 0, 't', now, 'n', now, 'e', id, 'q', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[4], now, ARGV[1])
return id
