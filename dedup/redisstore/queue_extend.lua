-- Renews a delivery's lease, if the caller still holds it: KEYS[1] the
-- record. ARGV[1] the group, ARGV[2] the event's key, ARGV[3] the
-- delivery's token, ARGV[4] the hash tag, ARGV[5] the lease ms, ARGV[6]
-- this process's consumer. Returns 1 when renewed, 0 when the caller no
-- longer holds the delivery.
local st = redis.call('HMGET', KEYS[1], 's', 'k', 'e', 'rt')
if st[1] ~= '4' or st[2] ~= ARGV[3] then
  return 0
end
-- A takeover needs both: the entry idle for a lease (XAUTOCLAIM), and the
-- lease end 'n' passed (Take). XCLAIM resets the idle time without
-- counting a delivery (JUSTID); the new lease end covers a lease longer
-- than the takers', and an entry not pending at all (put back on the
-- stream by a recovery). No stream, or no group: 'n' still holds it.
local stream = entry_stream(ARGV[4], ARGV[2], st[4] or '', st[3])
if stream then
  redis.pcall('XCLAIM', stream, ARGV[1], ARGV[6], 0, st[3], 'JUSTID')
end
redis.call('HSET', KEYS[1], 'n', now_ms() + tonumber(ARGV[5]))
return 1
