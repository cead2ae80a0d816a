-- Returns {open events, the oldest one's accepted ms or false, deliveries
-- held, dead letters, now}: KEYS[1] the empty route's stream, KEYS[2] the
-- set of the other routes, KEYS[3] the open events, KEYS[4] the dead
-- letters; ARGV[1] the group, ARGV[2] the hash tag.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
return {redis.call('ZCARD', KEYS[3]), oldest[2] or false, held_deliveries(ARGV[2], ARGV[1]), redis.call('ZCARD', KEYS[4]), now}
