-- Takes back an enqueue that too few replicas acknowledged, if the event
-- is still as queued: KEYS as queue_settle.lua's, ARGV[1] the group,
-- ARGV[2] the event's key, ARGV[3] the enqueue's token, ARGV[4] the hash
-- tag.
local st = redis.call('HMGET', KEYS[1], 'q', 's', 'e', 'rt', 'ok')
if st[1] ~= ARGV[3] or st[2] ~= '3' then
  return 0
end
drop_entry(ARGV[4], ARGV[1], ARGV[2], st[4] or '', st[3])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('DEL', KEYS[1], KEYS[2])
leave(ARGV[4], ARGV[1], ARGV[2], st[5])
return 1
